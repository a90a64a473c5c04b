"""What a run trains on: corpora (``corpus.py``: text / folder / glob / JSONL / shards / HF
datasets -> token ids), the shard writer (``prepare.py``), the batchers with plain-data
cursors (``batches.py``: packed, long-stream, synthetic task) and the config -> batches
pipeline (``pipeline.py``)."""

from __future__ import annotations

from .batches import (
    Batch,
    CorpusStreams,
    PackedBatches,
    SequentialStreams,
    StreamBatches,
    TaskBatches,
)
from .corpus import (
    SHARD_META,
    TEXTS,
    Corpus,
    hf_documents,
    is_shard_dir,
    iter_texts,
    load_corpus,
    read_shards,
    resolve_tokenizer,
    shard_files,
    text_files,
    token_dtype,
    tokenize_documents,
)
from .pipeline import Pipeline, build_pipeline
from .prepare import TOKENIZER_FILES, prepare

__all__ = [
    "SHARD_META",
    "TEXTS",
    "TOKENIZER_FILES",
    "Batch",
    "Corpus",
    "CorpusStreams",
    "PackedBatches",
    "Pipeline",
    "SequentialStreams",
    "StreamBatches",
    "TaskBatches",
    "build_pipeline",
    "hf_documents",
    "is_shard_dir",
    "iter_texts",
    "load_corpus",
    "prepare",
    "read_shards",
    "resolve_tokenizer",
    "shard_files",
    "text_files",
    "token_dtype",
    "tokenize_documents",
]
