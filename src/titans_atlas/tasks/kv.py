"""Key-value recall: token ids only, any vocabulary.

Axes: B batch rows, T tokens (``seq_len``), n pairs.

* ``kv_recall_batch``: a seeded batch with the answer exactly ``distance`` tokens back (the
  evaluation's recall-by-distance and ``DistanceRecall``'s draws).
* ``KeyValueRecall`` / ``DistanceRecall`` / ``MultiQueryRecall``: training tasks
  (``task:kv_recall`` / ``kv_distance`` / ``kv_multi``), ``sample(B, generator)`` ->
  ``inputs [B, T]``, ``labels [B, T]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .base import IGNORE, Batch, check_task_ints


def kv_recall_batch(
    batch_size: int,
    seq_len: int,
    distance: int,
    vocab_size: int,
    *,
    seed: int,
    num_pairs: int = 1,
) -> Batch:
    """Key-value recall with the answer ``distance`` tokens back.

    Keys are drawn from [1, V/2) and values from [V/2, V) (as MQAR), noise from the keys'
    range minus this sequence's keys, so each key occurs once before its query. The queried
    pair's value sits at position ``seq_len - 1 - distance`` (its key just before); the query
    key is the last input token and its label is the value. ``num_pairs - 1`` distractor
    pairs sit at random other places. A model that attends over W tokens sees the value only
    when ``distance < W``."""
    if distance < 1 or seq_len < distance + 2:
        raise ValueError(
            f"need 1 <= distance <= seq_len - 2, got distance={distance}, seq_len={seq_len}"
        )
    if num_pairs < 1 or 2 * num_pairs > seq_len - 1:
        raise ValueError(f"num_pairs must lie in [1, (seq_len - 1) / 2], got {num_pairs}")
    if vocab_size // 2 - 1 <= num_pairs:
        raise ValueError(f"vocab_size={vocab_size} leaves no noise tokens for {num_pairs} pairs")
    rng = np.random.default_rng(seed)
    inputs = np.zeros((batch_size, seq_len), dtype=np.int64)
    labels = np.full((batch_size, seq_len), IGNORE, dtype=np.int64)
    value_at = seq_len - 1 - distance
    for row in range(batch_size):
        keys = rng.choice(np.arange(1, vocab_size // 2), num_pairs, replace=False)
        values = rng.integers(vocab_size // 2, vocab_size, num_pairs)
        noise = np.setdiff1d(np.arange(1, vocab_size // 2), keys)
        inputs[row] = rng.choice(noise, seq_len)
        starts = [value_at - 1, *_free_pair_starts(rng, seq_len - 1, value_at - 1, num_pairs - 1)]
        for start, key, value in zip(starts, keys, values):
            inputs[row, start], inputs[row, start + 1] = key, value
        inputs[row, -1], labels[row, -1] = keys[0], values[0]
    return Batch(torch.from_numpy(inputs), torch.from_numpy(labels))


def _free_pair_starts(rng: np.random.Generator, end: int, taken: int, count: int) -> list[int]:
    """``count`` starts of 2-token slots in [0, end) that overlap neither each other nor the
    slot at ``taken``."""
    slots = _free_slots(end, taken)
    if len(slots) < count:
        raise ValueError(f"no room for {count} distractor pairs in {end} tokens")
    return sorted(rng.choice(slots, count, replace=False).tolist())


def _free_slots(end: int, taken: int) -> list[int]:
    """Starts of the 2-token slots in [0, end) that do not overlap the slot at ``taken``."""
    return [s for s in range(0, end - 1, 2) if abs(s - taken) > 1]


@dataclass(frozen=True)
class KeyValueRecall:
    """``num_pairs`` (key, value) pairs, ``distance`` filler tokens, then every key again in
    a random order, each followed by its value: the value after a repeated key is scored.
    The first query stands ``distance`` tokens after the last pair (the recall distance)."""

    seq_len: int
    num_pairs: int = 4
    distance: int | None = None  # None: whatever seq_len leaves (seq_len - 4 * num_pairs)
    num_keys: int = 32
    num_values: int = 32
    num_fillers: int = 16

    def __post_init__(self) -> None:
        check_task_ints(
            self,
            {"seq_len": 1, "num_pairs": 1, "distance": 0, "num_keys": 1, "num_values": 1,
             "num_fillers": 1},
            optional=("distance",),
        )  # fmt: skip
        if self.num_pairs > self.num_keys:
            raise ValueError(
                f"data.task_args.num_pairs must lie in [1, num_keys={self.num_keys}], "
                f"got {self.num_pairs}"
            )
        if self.gap < 0 or 4 * self.num_pairs + self.gap > self.seq_len + 1:
            raise ValueError(
                f"train.seq_len={self.seq_len} cannot hold data.task_args.num_pairs="
                f"{self.num_pairs} pairs twice and data.task_args.distance={self.distance}: "
                "need 4 * num_pairs + distance <= seq_len + 1 (with distance null, "
                "4 * num_pairs <= seq_len)"
            )

    @property
    def gap(self) -> int:
        return self.seq_len - 4 * self.num_pairs if self.distance is None else self.distance

    @property
    def vocab_size(self) -> int:
        return self.num_fillers + self.num_keys + self.num_values

    def sample(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, rows = self.num_pairs, batch_size
        keys = torch.rand(rows, self.num_keys, generator=generator).argsort(-1)[:, :n]
        keys = keys + self.num_fillers  # [B, n] distinct per row
        values = torch.randint(self.num_values, (rows, n), generator=generator)
        values = values + self.num_fillers + self.num_keys
        order = torch.rand(rows, n, generator=generator).argsort(-1)  # query order
        filler = torch.randint(self.num_fillers, (rows, self.gap), generator=generator)
        pairs = torch.stack([keys, values], dim=-1).flatten(1)  # [B, 2n]
        queries = torch.stack([keys.gather(1, order), values.gather(1, order)], -1).flatten(1)
        seq = torch.cat([pairs, filler, queries], dim=1)  # [B, 4n + gap]
        pad = torch.randint(
            self.num_fillers, (rows, self.seq_len + 1 - seq.shape[1]), generator=generator
        )
        seq = torch.cat([pad, seq], dim=1)[:, : self.seq_len + 1]  # filler before the pairs
        inputs, labels = seq[:, :-1], seq[:, 1:].clone()
        scored = torch.zeros_like(labels, dtype=torch.bool)
        scored[:, 1 - 2 * n :: 2] = True  # the inputs that are queried keys: next is the value
        labels[~scored] = IGNORE
        return inputs, labels


@dataclass(frozen=True)
class DistanceRecall:
    """The evaluation's key-value recall (``kv_recall_batch``: ids only, keys in
    [1, V/2), values in [V/2, V), ``num_pairs - 1`` distractor pairs, one query at the end)
    with one recall distance per batch, drawn uniformly from [min_distance, max_distance]
    (None: ``seq_len - 2``, the farthest a sequence holds). Training on every distance up to
    the sequence length is what the recall-by-distance evaluation then measures, at distances
    in units of the attention window and at lengths past ``seq_len`` (research/LOG.md)."""

    seq_len: int
    vocab_size: int = 32
    num_pairs: int = 4
    min_distance: int = 1
    max_distance: int | None = None

    def __post_init__(self) -> None:
        check_task_ints(
            self,
            {"seq_len": 3, "vocab_size": 1, "num_pairs": 1, "min_distance": 1, "max_distance": 1},
            optional=("max_distance",),
        )
        top = self.top_distance
        if not self.min_distance <= top <= self.seq_len - 2:
            raise ValueError(
                "need 1 <= data.task_args.min_distance <= data.task_args.max_distance <= "
                f"train.seq_len - 2 = {self.seq_len - 2}, got min_distance={self.min_distance}, "
                f"max_distance={self.max_distance}"
            )
        if self.vocab_size // 2 - 1 <= self.num_pairs:
            raise ValueError(
                f"data.task_args.vocab_size={self.vocab_size} leaves no noise ids for "
                f"num_pairs={self.num_pairs}: it must be >= 2 * num_pairs + 4"
            )
        # the distractors' room is smallest where the queried pair splits two slots; the
        # three smallest distances hold both parities of its place
        distances = range(self.min_distance, min(top, self.min_distance + 2) + 1)
        room = min(len(_free_slots(self.seq_len - 1, self.seq_len - 2 - d)) for d in distances)
        if self.num_pairs - 1 > room:
            raise ValueError(
                f"data.task_args.num_pairs={self.num_pairs} does not fit train.seq_len="
                f"{self.seq_len}: at most {room + 1} pairs (one queried, the others "
                "distractors in free 2-token slots)"
            )

    @property
    def top_distance(self) -> int:
        return self.seq_len - 2 if self.max_distance is None else self.max_distance

    def sample(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        distance = int(
            torch.randint(self.min_distance, self.top_distance + 1, (1,), generator=generator)
        )
        seed = int(torch.randint(1 << 62, (1,), generator=generator))
        batch = kv_recall_batch(
            batch_size, self.seq_len, distance, self.vocab_size, seed=seed, num_pairs=self.num_pairs
        )
        return batch.input_ids, batch.labels


@dataclass(frozen=True)
class MultiQueryRecall:
    """Key-value recall with every pair queried: ``num_pairs`` (key, value) pairs at random
    places among noise, then ``num_queries`` of the keys again at the end, each followed by
    its value; the value after every repeated key is scored. Ids as in the evaluation's
    ``kv_recall_batch`` (keys in [1, V/2), values in [V/2, V), noise from the keys' range
    minus this row's keys), so a model trained here is measured there. The distances to the
    answers vary per row, from a few tokens up to the sequence length.

    Why beside ``DistanceRecall``: one query per row scores 1 token in ``seq_len``; scoring
    every pair gives the outer optimiser ``num_queries`` times the signal per step, which is
    what lets small memory models leave the chance plateau within minutes (research/LOG.md).

    ``layout="interleaved"`` puts each query at a random slot *after* its pair instead of in
    a block at the end, so every distance from 1 slot on occurs in training. With
    ``num_queries < num_pairs`` no query can be answered by elimination either (when every
    pair is asked, the last query has one value left, in either layout)."""

    seq_len: int
    vocab_size: int = 32
    num_pairs: int = 4
    num_queries: int | None = None  # None: every pair
    layout: str = "end"  # "end" | "interleaved"

    def __post_init__(self) -> None:
        check_task_ints(
            self,
            {"seq_len": 1, "vocab_size": 1, "num_pairs": 1, "num_queries": 1},
            optional=("num_queries",),
        )
        if not isinstance(self.layout, str) or self.layout not in ("end", "interleaved"):
            raise ValueError(
                f"data.task_args.layout must be 'end' or 'interleaved', got {self.layout!r}"
            )
        keys = self.vocab_size // 2 - 1
        if not 1 <= self.num_pairs < keys:
            raise ValueError(
                f"data.task_args.num_pairs must lie in [1, {keys - 1}] (vocab_size="
                f"{self.vocab_size} leaves {keys} key ids and noise needs one), "
                f"got {self.num_pairs}"
            )
        if not 1 <= self.queries <= self.num_pairs:
            raise ValueError(
                f"data.task_args.num_queries must lie in [1, num_pairs={self.num_pairs}], "
                f"got {self.num_queries}"
            )
        needed = self.num_pairs + (self.queries if self.layout == "interleaved" else 0)
        if self.slots < needed:
            raise ValueError(
                f"train.seq_len={self.seq_len} has {self.slots} free 2-token slots, "
                f"num_pairs={self.num_pairs} with layout={self.layout!r} needs {needed}"
            )

    @property
    def queries(self) -> int:
        return self.num_pairs if self.num_queries is None else self.num_queries

    @property
    def slots(self) -> int:
        """Even 2-token slots (for the end layout: those before the 2 * queries - 1 tail)."""
        tail = 2 * self.queries if self.layout == "end" else 0
        return max(0, (self.seq_len - tail) // 2)

    def sample(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.lay_out(*self.facts(batch_size, generator), generator)

    def facts(self, rows: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """Each row's pairs and noise: keys ``[B, n]`` (distinct ids in [1, V/2)), values
        ``[B, n]`` (in [V/2, V)) and the noise ids ``[B, V/2 - 1 - n]`` (the key range minus
        the row's keys)."""
        half = self.vocab_size // 2
        draw = torch.rand(rows, half - 1, generator=generator).argsort(-1)
        values = torch.randint(half, self.vocab_size, (rows, self.num_pairs), generator=generator)
        return draw[:, : self.num_pairs] + 1, values, draw[:, self.num_pairs :] + 1

    def lay_out(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        noise_ids: torch.Tensor,
        generator: torch.Generator,
        store: torch.Tensor | None = None,
        reveal: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of ``facts``: noise, the pairs (only where ``store`` is set: ``[B]`` bool per
        row or ``[B, n]`` per pair; None: all), then the queries. Pairs not stored here were
        stored earlier in the row's stream (``persistent_recall``). ``reveal``: each answer
        but the last follows its query as the next input (as in text); False leaves noise
        there, so the query tail never writes a pair again."""
        rows, n, m = keys.shape[0], self.num_pairs, self.queries
        pick = torch.randint(noise_ids.shape[1], (rows, self.seq_len), generator=generator)
        inputs = noise_ids.gather(1, pick)  # [B, T]
        labels = torch.full_like(inputs, IGNORE)
        if self.layout == "interleaved":
            if store is not None:
                raise ValueError("only layout='end' lays out rows without their pairs")
            self._interleave(inputs, labels, keys, values, generator)
            return inputs, labels
        slot = torch.rand(rows, self.slots, generator=generator).argsort(-1)[:, :n]
        starts = 2 * slot  # [B, n] distinct even positions before the tail
        if store is not None:  # pairs not stored here leave their slots to noise
            store = store[:, None] if store.ndim == 1 else store  # [B, 1] or [B, n]
            keys_here = torch.where(store, keys, inputs.gather(1, starts))
            values_here = torch.where(store, values, inputs.gather(1, starts + 1))
        else:
            keys_here, values_here = keys, values
        inputs.scatter_(1, starts, keys_here)
        inputs.scatter_(1, starts + 1, values_here)
        asked = torch.rand(rows, n, generator=generator).argsort(-1)[:, :m]  # [B, m]
        key_at = self.seq_len - (2 * m - 1) + 2 * torch.arange(m)  # [m] query positions
        inputs[:, key_at] = keys.gather(1, asked)
        labels[:, key_at] = values.gather(1, asked)
        if reveal:
            inputs[:, key_at[:-1] + 1] = values.gather(1, asked)[:, :-1]  # the last: no slot
        return inputs, labels

    def _interleave(self, inputs, labels, keys, values, generator) -> None:
        """Write n pairs and m queries into random 2-token slots of ``inputs`` / ``labels``
        ``[B, T]``: a random order of the events in which each asked pair occurs twice, the
        first occurrence its store and the second its query (key, then value, scored)."""
        rows, n, m = inputs.shape[0], self.num_pairs, self.queries
        asked = torch.rand(rows, n, generator=generator).argsort(-1)[:, :m]  # [B, m]
        events = torch.cat([torch.arange(n).expand(rows, n), asked], dim=1)  # [B, n + m] pair ids
        order = torch.rand(rows, n + m, generator=generator).argsort(-1)
        events = events.gather(1, order)
        earlier = torch.ones(n + m, n + m, dtype=torch.bool).tril(-1)  # [i, j]: j before i
        is_query = ((events[:, :, None] == events[:, None, :]) & earlier).any(-1)  # [B, n + m]
        slot = torch.rand(rows, self.slots, generator=generator).argsort(-1)[:, : n + m]
        starts = 2 * slot.sort(-1).values  # [B, n + m] even positions in event order
        inputs.scatter_(1, starts, keys.gather(1, events))
        inputs.scatter_(1, starts + 1, values.gather(1, events))
        answers = torch.where(is_query, values.gather(1, events), IGNORE)
        labels.scatter_(1, starts, answers)
