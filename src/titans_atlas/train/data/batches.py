"""Batches from a corpus, with a resumable cursor that is plain data (JSON).

Axes: B batch rows, T tokens (``seq_len``). Every batcher has ``next() -> Batch``,
``state_dict() -> dict`` and ``load_state_dict(dict)``; with ``rank``/``world_size`` each
process takes its own rows of one global batch (so data-parallel training sees the same
global batch as one process).

* ``PackedBatches``: windows of T + 1 tokens at stride T over each part (documents packed
  back to back), in a seeded permutation per epoch; every window is a fresh stream.
* ``StreamBatches``: the long-stream mode. Documents are cut into streams of at most
  ``stream_tokens`` tokens; each row reads one stream in consecutive windows (the model state
  is carried from window to window) and, when it ends, pads the rest of its window (labels
  -100) and takes the next stream, flagged ``reset`` so the loop gives that row a fresh
  state. Windows therefore always start at a stream start or where the last one stopped.
* ``TaskBatches``: draws of a synthetic task (``titans_atlas.tasks``), each batch from a generator
  seeded by (seed, batch index); in stream mode each row a stream of W task sequences.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import torch

from ...tasks import IGNORE, Task
from .corpus import Corpus


@dataclass
class Batch:
    inputs: torch.Tensor  # [B, T] int64
    labels: torch.Tensor  # [B, T] int64, IGNORE where unscored
    reset: torch.Tensor | None = None  # [B] bool: rows that start a new stream (None: all)


def _check_rank(batch_size: int, rank: int, world_size: int) -> None:
    if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(
            "need batch_size >= 1 and 0 <= rank < world_size, "
            f"got {batch_size}, {rank}, {world_size}"
        )


class PackedBatches:
    def __init__(
        self,
        corpus: Corpus,
        batch_size: int,
        seq_len: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        _check_rank(batch_size, rank, world_size)
        self.corpus, self.batch_size, self.seq_len, self.seed = corpus, batch_size, seq_len, seed
        self.rank, self.world_size = rank, world_size
        starts = [np.arange(0, len(tokens) - seq_len, seq_len) for tokens, _ in corpus.parts]
        self.part_of = np.concatenate([np.full(len(s), i) for i, s in enumerate(starts)] or [[]])
        self.start_of = np.concatenate(starts or [[]]).astype(np.int64)
        if len(self.start_of) < batch_size * world_size:
            raise ValueError(
                f"the data holds {len(self.start_of)} windows of {seq_len + 1} tokens, fewer than "
                f"one batch of {batch_size * world_size}: use more data or a smaller seq_len"
            )
        self.epoch, self.index = 0, 0
        self._order = self._permutation()

    def _permutation(self) -> np.ndarray:
        return np.random.default_rng([self.seed, self.epoch]).permutation(len(self.start_of))

    def next(self) -> Batch:
        global_batch = self.batch_size * self.world_size
        if self.index + global_batch > len(self._order):  # drop the ragged end of an epoch
            self.epoch, self.index = self.epoch + 1, 0
            self._order = self._permutation()
        chosen = self._order[self.index + self.rank * self.batch_size :][: self.batch_size]
        self.index += global_batch
        rows = [
            np.asarray(self.corpus.parts[p][0][s : s + self.seq_len + 1], dtype=np.int64)
            for p, s in zip(self.part_of[chosen], self.start_of[chosen])
        ]
        window = torch.from_numpy(np.stack(rows))  # [B, T + 1]
        return Batch(window[:, :-1].contiguous(), window[:, 1:].contiguous())

    def state_dict(self) -> dict:
        return {"kind": "packed", "epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._order = self._permutation()


class CorpusStreams:
    """Streams of a Corpus: each document cut into pieces of at most ``max_tokens``,
    visited in a seeded permutation per epoch."""

    def __init__(self, corpus: Corpus, max_tokens: int, seed: int) -> None:
        self.corpus, self.seed = corpus, seed
        pieces = []
        for part, (_, bounds) in enumerate(corpus.parts):
            for lo, hi in pairwise(bounds):
                cuts = np.arange(lo, hi, max_tokens)
                pieces += [
                    (part, a, min(a + max_tokens, hi))
                    for a in cuts
                    if min(a + max_tokens, hi) - a >= 2
                ]
        if not pieces:
            raise ValueError("the data holds no document of 2 or more tokens")
        self.pieces = np.asarray(pieces, dtype=np.int64)  # [S, 3] part, start, end
        self._orders: dict[int, np.ndarray] = {}

    def stream_id(self, epoch: int, k: int) -> int | None:
        if k >= len(self.pieces):
            return None
        if epoch not in self._orders:
            self._orders = {
                epoch: np.random.default_rng([self.seed, epoch]).permutation(len(self.pieces))
            }
        return int(self._orders[epoch][k])

    def tokens(self, stream: int, start: int, stop: int) -> np.ndarray:
        part, lo, hi = self.pieces[stream]
        return self.corpus.parts[part][0][lo + start : min(lo + stop, hi)]


class SequentialStreams:
    """Streams of documents that arrive in order (a streamed dataset): stream g is the g-th
    document of the endless sequence epoch after epoch (document g mod N once N is known).
    ``documents(start)`` opens the source at document ``start``; documents that no row needs
    any more are dropped."""

    def __init__(self, documents: Callable[[int], Iterator[np.ndarray]]) -> None:
        self.documents = documents
        self.num_docs: int | None = None
        self._iter: Iterator[np.ndarray] | None = None
        self._count, self._cache, self.keep_from = 0, {}, 0

    def _open(self, g: int) -> None:
        start = g % self.num_docs if self.num_docs else g
        self._iter, self._count = self.documents(start), g

    def stream_id(self, epoch: int, k: int) -> int:
        if k in self._cache:
            return k
        if self._iter is None or self._count > k:
            self._open(max(self.keep_from, 0) if self._iter is None else k)
        while self._count <= k:
            doc = next(self._iter, None)
            if doc is None:  # the end of the source: it holds self._count documents
                if self.num_docs is None and self._count == 0:
                    raise ValueError("the streamed data source holds no document")
                self.num_docs = self.num_docs or self._count
                self._open(self._count)
                continue
            if self._count >= self.keep_from:
                self._cache[self._count] = doc
            self._count += 1
        return k

    def tokens(self, stream: int, start: int, stop: int) -> np.ndarray:
        return self._cache[self.stream_id(0, stream)][start:stop]

    def release(self, oldest: int) -> None:
        self.keep_from = oldest
        self._cache = {k: v for k, v in self._cache.items() if k >= oldest}


class StreamBatches:
    def __init__(
        self, streams, batch_size: int, seq_len: int, rank: int = 0, world_size: int = 1
    ) -> None:
        _check_rank(batch_size, rank, world_size)
        self.streams, self.batch_size, self.seq_len = streams, batch_size, seq_len
        self.rank, self.world_size = rank, world_size
        self.epoch, self.next_k = 0, 0
        self.rows: list[list[int]] = [[-1, 0] for _ in range(batch_size * world_size)]  # id, offset

    def _take(self) -> int:
        sid = self.streams.stream_id(self.epoch, self.next_k)
        if sid is None:
            self.epoch, self.next_k = self.epoch + 1, 0
            sid = self.streams.stream_id(self.epoch, 0)
        self.next_k += 1
        return sid

    def next(self) -> Batch:
        """One window per global row (every rank's cursor stays the same); returns this
        rank's rows."""
        width = self.seq_len + 1
        inputs = np.zeros((len(self.rows), self.seq_len), dtype=np.int64)
        labels = np.full((len(self.rows), self.seq_len), IGNORE, dtype=np.int64)
        reset = np.zeros(len(self.rows), dtype=bool)
        for r, row in enumerate(self.rows):
            if row[0] < 0:
                row[:], reset[r] = [self._take(), 0], True
            window = np.asarray(self.streams.tokens(row[0], row[1], row[1] + width), dtype=np.int64)
            count = max(len(window) - 1, 0)
            inputs[r, :count], labels[r, :count] = window[:count], window[1 : count + 1]
            row[1] += self.seq_len
            if len(window) < width or len(self.streams.tokens(row[0], row[1], row[1] + 2)) < 2:
                row[0] = -1  # stream done: the next window starts a new one
        if hasattr(self.streams, "release"):
            active = [r[0] for r in self.rows if r[0] >= 0]
            self.streams.release(min(active) if active else self.next_k)
        mine = slice(self.rank * self.batch_size, (self.rank + 1) * self.batch_size)
        return Batch(
            torch.from_numpy(inputs[mine]),
            torch.from_numpy(labels[mine]),
            torch.from_numpy(reset[mine]),
        )

    def state_dict(self) -> dict:
        state = {"kind": "stream", "epoch": self.epoch, "next": self.next_k}
        state["num_docs"] = getattr(self.streams, "num_docs", None)
        return {**state, "rows": [list(r) for r in self.rows]}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.next_k = int(state["epoch"]), int(state["next"])
        self.rows = [[int(a), int(b)] for a, b in state["rows"]]
        if len(self.rows) != self.batch_size * self.world_size:
            raise ValueError(
                f"cursor has {len(self.rows)} rows, "
                f"this run has {self.batch_size * self.world_size}"
            )
        if hasattr(self.streams, "release"):
            self.streams.num_docs = state.get("num_docs")
            active = [r[0] for r in self.rows if r[0] >= 0]
            self.streams.release(min(active) if active else self.next_k)


class TaskBatches:
    """Batches of a task; batch n comes from a generator seeded with (seed, n), so the
    cursor is one integer and every world size sees the same global batches.

    ``stream_windows`` = W > 0 (stream mode): each row is a stream of W consecutive task
    sequences, read with the model state carried from one to the next; global row r starts
    a fresh stream at the batches n (drawn batches, micro-batches under accumulation) with
    (n + r) % W == 0. The ages in one batch are a run of consecutive values mod W, so with at
    least W global rows every batch holds every age from 0 to W - 1 windows; with fewer,
    some batches hold no fresh row. 0: every batch starts fresh (``reset`` None), as packed
    mode. A task with ``sample_stream`` gets each row's age and its stream's seed, a function
    of (seed, the batch the stream began at, global row)."""

    def __init__(
        self,
        task: Task,
        batch_size: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        stream_windows: int = 0,
    ):
        _check_rank(batch_size, rank, world_size)
        if stream_windows < 0:
            raise ValueError(f"stream_windows must be >= 0, got {stream_windows}")
        self.task, self.batch_size, self.seed = task, batch_size, seed
        self.rank, self.world_size, self.step = rank, world_size, 0
        self.stream_windows = stream_windows

    def next(self) -> Batch:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.step)
        total = self.batch_size * self.world_size
        rows = torch.arange(total)  # global row indices
        ages = (self.step + rows) % self.stream_windows if self.stream_windows else None
        if ages is not None and hasattr(self.task, "sample_stream"):
            inputs, labels = self.task.sample_stream(*self._streams(ages, rows), generator)
        else:
            inputs, labels = self.task.sample(total, generator)
        mine = slice(self.rank * self.batch_size, (self.rank + 1) * self.batch_size)
        reset = None if ages is None else (ages == 0)[mine]
        self.step += 1
        return Batch(inputs[mine].contiguous(), labels[mine].contiguous(), reset)

    def _streams(self, ages: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Each row's sequence index in its stream and the stream's seed (``[B]`` int64), for
        a task whose facts last a stream. A stream under way at the first batch began there
        (the loop starts every row fresh), so its age counts from batch 0."""
        ages = ages.clamp(max=self.step)
        start = self.step - ages  # the batch at which the row's stream began
        return ages, (self.seed * 1_000_003 + start) * 1_000_033 + rows

    def state_dict(self) -> dict:
        return {"kind": "task", "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.step = int(state["step"])
