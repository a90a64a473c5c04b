"""From a RunConfig to batches: the tokenizer, the training batcher, and a factory of
validation batchers (a fresh one per evaluation, so every evaluation reads the same tokens).

Axes: B batch rows, T tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ...tasks import make_task
from ...tokenizers import IdTokenizer, Tokenizer, token_byte_lengths
from ..config import RunConfig
from .batches import (
    CorpusStreams,
    PackedBatches,
    SequentialStreams,
    StreamBatches,
    TaskBatches,
)
from .corpus import Corpus, hf_documents, load_corpus, resolve_tokenizer, token_dtype


@dataclass
class Pipeline:
    tokenizer: Tokenizer  # a synthetic task's own, else IdTokenizer (ids that stand for no text)
    vocab_size: int  # the model needs at least this many ids
    train: object  # a batcher: next() / state_dict() / load_state_dict()
    make_val: Callable[[], tuple[object, int]]  # -> (fresh batcher, number of batches)
    byte_lengths: torch.Tensor | None  # [V] bytes per token id, for bits per byte


def build_pipeline(config: RunConfig, rank: int = 0, world_size: int = 1) -> Pipeline:
    data, loop = config.data, config.train
    if data.source.startswith("task:"):
        return _task_pipeline(config, rank, world_size)
    tokenizer = resolve_tokenizer(data)
    lengths = torch.tensor(token_byte_lengths(tokenizer), dtype=torch.float64)
    if data.source.startswith("hf:") and data.hf_streaming:
        train = _streamed_hf(config, tokenizer, rank, world_size)
        val_corpus = load_corpus(data, tokenizer, data.val_source) if data.val_source else None
        if val_corpus is None:
            raise ValueError("a streamed dataset needs data.val_source for validation")
    else:
        corpus = load_corpus(data, tokenizer)
        if data.val_source:
            train_corpus, val_corpus = corpus, load_corpus(data, tokenizer, data.val_source)
        else:
            train_corpus, val_corpus = corpus.split(data.val_fraction)
        train = _corpus_batches(config, train_corpus, loop.seed, rank, world_size)
    rows = loop.batch_size

    def make_val():
        if val_corpus.num_tokens < 2:
            raise ValueError("no validation tokens: raise data.val_fraction or set data.val_source")
        if data.mode == "stream":
            lane = math.ceil(val_corpus.num_tokens / (rows * world_size))
            batcher = StreamBatches(
                CorpusStreams(val_corpus, max(lane, 2), seed=0),
                rows,
                loop.seq_len,
                rank,
                world_size,
            )
            count = math.ceil(lane / loop.seq_len)
        else:
            windows = max(val_corpus.num_tokens - 1, 0) // loop.seq_len
            if windows < world_size:
                raise ValueError(
                    f"the validation text holds {val_corpus.num_tokens} tokens, fewer than one "
                    f"window of {loop.seq_len + 1} (train.seq_len + 1) per rank: use more data, "
                    "a larger data.val_fraction, data.val_source, or a smaller train.seq_len"
                )
            count = max(windows // (rows * world_size), 1)
            batcher = PackedBatches(
                val_corpus,
                min(rows, windows // world_size),
                loop.seq_len,
                seed=0,
                rank=rank,
                world_size=world_size,
            )
        if loop.eval_tokens:
            count = min(count, math.ceil(loop.eval_tokens / (rows * world_size * loop.seq_len)))
        return batcher, count

    return Pipeline(tokenizer, tokenizer.vocab_size, train, make_val, lengths)


def _corpus_batches(config: RunConfig, corpus: Corpus, seed: int, rank: int, world_size: int):
    loop = config.train
    if config.data.mode == "packed":
        return PackedBatches(corpus, loop.batch_size, loop.seq_len, seed, rank, world_size)
    lane = config.data.stream_tokens or math.ceil(
        corpus.num_tokens / (loop.batch_size * world_size)
    )
    streams = CorpusStreams(corpus, max(lane, loop.seq_len + 1), seed)
    return StreamBatches(streams, loop.batch_size, loop.seq_len, rank, world_size)


def _streamed_hf(config: RunConfig, tokenizer: Tokenizer, rank: int, world_size: int):
    """Documents straight from a streamed dataset, in order (both modes read them through
    rows of streams; packed mode just does not carry the state)."""
    eos = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    dtype = token_dtype(tokenizer.vocab_size)

    def documents(start: int):
        for index, text in enumerate(hf_documents(config.data)):
            if index >= start:
                yield np.asarray(tokenizer.encode(text) + eos, dtype=dtype)

    loop = config.train
    return StreamBatches(
        SequentialStreams(documents), loop.batch_size, loop.seq_len, rank, world_size
    )


def _task_stream_windows(config: RunConfig) -> int:
    """Stream mode on a task: the windows of ``seq_len`` in each row's carried stream (0 in
    packed mode). A task has no documents to cut, so the stream's length must be given."""
    tokens, seq_len = config.data.stream_tokens, config.train.seq_len
    if config.data.mode != "stream":
        return 0
    if tokens <= 0 or tokens % seq_len:
        raise ValueError(
            "a task in data.mode='stream' needs data.stream_tokens, the length of each row's "
            f"carried stream, as a positive multiple of train.seq_len={seq_len}; got {tokens}"
        )
    return tokens // seq_len


def _task_pipeline(config: RunConfig, rank: int, world_size: int) -> Pipeline:
    loop = config.train
    task = make_task(config.data.source.removeprefix("task:"), loop.seq_len, config.data.task_args)
    windows = _task_stream_windows(config)
    train = TaskBatches(task, loop.batch_size, loop.seed, rank, world_size, windows)
    count = max(
        1, math.ceil((loop.eval_tokens or 4096) / (loop.batch_size * world_size * loop.seq_len))
    )

    held_out = task.validation() if hasattr(task, "validation") else task  # e.g. a test split

    def make_val():
        return TaskBatches(held_out, loop.batch_size, loop.seed + 7919, rank, world_size), count

    tokenizer = getattr(task, "tokenizer", None) or IdTokenizer(task.vocab_size)
    return Pipeline(tokenizer, task.vocab_size, train, make_val, None)
