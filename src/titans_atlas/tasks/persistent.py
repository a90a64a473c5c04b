"""Key-value recall whose facts stay true along a carried stream (``task:kv_persistent``).

Axes: B batch rows, T tokens (``seq_len``), n pairs.

``kv_multi`` draws new pairs for every sequence, so in stream mode the pairs a row carried
from its previous sequence are stale: the same key ids come back with new values, and a
model trained that way learns to forget whatever is older than one sequence (research/LOG.md,
section 1). Here a row's pairs belong to its stream: the stream's first sequence stores them
among noise and asks about them at its end, as ``kv_multi`` does, and every later sequence of
the same stream holds noise only and asks about the same pairs again at its end. The answers
are not shown after their queries (noise stands there): shown, every sequence's query tail
would write the pairs again and no answer would lie more than one sequence back. So a query
in the stream's k-th sequence has its answer between k and k + 1 sequences back, and with the
state carried (truncated backpropagation through time) the outer optimiser is rewarded for a
memory that keeps a pair through noise, which packed training never asks for.

With ``new_pairs = e`` every sequence also stores e pairs of its own among the noise (keys
the stream's facts do not use, drawn per sequence) and asks them in its query tail
with the stream's pairs. Without them nothing but noise is written after a stream's first
sequence, and a model trained so learned to keep a pair through noise but not through newer
pairs (research/LOG.md); with them the writes that must not erase the stream's facts are
pairs like them, as the evaluation's distractors are. Every key id has one value for the
whole stream, so a key that comes back as a new pair brings the same value: nothing a stream
says goes stale. (A first version drew a new value whenever a key came back, which brings
back the stale pairs this task exists to avoid; it measured the same: research/LOG.md.)

The stream's pairs are drawn from a generator seeded by the stream alone (``stream_seeds``),
so they are the same in every sequence of the stream, on every rank, and after a resume.
Outside stream mode (packed training, validation) every row is a stream's first sequence:
``kv_multi``'s end layout without the answers after the queries, with ids as the
evaluation's ``kv_recall_batch``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import check_task_ints
from .kv import MultiQueryRecall


@dataclass(frozen=True)
class PersistentRecall:
    """``num_pairs`` pairs per stream among noise and ``new_pairs`` more per sequence;
    ``num_queries`` of a sequence's pairs (default all, in a new order each time) asked at
    its end, unanswered."""

    seq_len: int
    vocab_size: int = 32
    num_pairs: int = 4
    num_queries: int | None = None
    new_pairs: int = 0

    def __post_init__(self) -> None:
        check_task_ints(
            self,
            {"seq_len": 1, "vocab_size": 1, "num_pairs": 1, "num_queries": 1, "new_pairs": 0},
            optional=("num_queries",),
        )
        room = self.vocab_size // 2 - 2 - self.num_pairs  # key ids left beside one for noise
        if self.new_pairs and not self.new_pairs <= room:
            raise ValueError(
                f"data.task_args.new_pairs must lie in [0, {room}] (vocab_size="
                f"{self.vocab_size} and num_pairs={self.num_pairs} leave that many key ids), "
                f"got {self.new_pairs}"
            )
        self.one_sequence()  # ValueErrors for bad arguments, as kv_multi raises them

    def one_sequence(self) -> MultiQueryRecall:
        """The layout of one sequence: ``kv_multi``'s end layout of the stream's pairs and
        the sequence's new ones."""
        pairs = self.num_pairs + self.new_pairs
        return MultiQueryRecall(self.seq_len, self.vocab_size, pairs, self.num_queries)

    def sample(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every row a fresh stream's first sequence."""
        seeds = torch.randint(1 << 62, (batch_size,), generator=generator)
        return self.sample_stream(torch.zeros(batch_size, dtype=torch.long), seeds, generator)

    def sample_stream(
        self, ages: torch.Tensor, stream_seeds: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Row b: sequence ``ages[b]`` (0 = the first) of the stream ``stream_seeds[b]``
        (both ``[B]`` int64); ``generator`` draws what differs per sequence (noise, places,
        query order)."""
        if ages.shape != stream_seeds.shape or ages.ndim != 1:
            raise ValueError(
                f"ages and stream_seeds must both be [B]; got {list(ages.shape)} and "
                f"{list(stream_seeds.shape)}"
            )
        if bool((ages < 0).any()):
            raise ValueError("ages must be >= 0")
        per_stream = [self._stream(int(seed)) for seed in stream_seeds]
        keys, values, noise_ids, table = (torch.cat(part) for part in zip(*per_stream))
        store = ages == 0  # [B]
        if self.new_pairs:
            keys, values, noise_ids = self._add_new_pairs(keys, values, noise_ids, table, generator)
            new = torch.ones(len(ages), self.new_pairs, dtype=torch.bool)  # stored every time
            store = torch.cat([store[:, None].expand(-1, self.num_pairs), new], 1)  # [B, n + e]
        layout = self.one_sequence()
        return layout.lay_out(keys, values, noise_ids, generator, store=store, reveal=False)

    def _stream(self, seed: int) -> tuple[torch.Tensor, ...]:
        """One stream's pairs: keys and values ``[1, n]``, noise ids ``[1, N]`` (``kv_multi``'s
        draws), and its value for every key id ``[1, V/2 - 1]`` (id k at k - 1), which the
        sequences' new pairs take, so a key that comes back brings the same value."""
        generator = torch.Generator().manual_seed(seed)
        streams = MultiQueryRecall(self.seq_len, self.vocab_size, self.num_pairs)
        keys, values, noise_ids = streams.facts(1, generator)
        half = self.vocab_size // 2
        table = torch.randint(half, self.vocab_size, (1, half - 1), generator=generator)
        return keys, values, noise_ids, table

    def _add_new_pairs(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        noise_ids: torch.Tensor,
        table: torch.Tensor,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The stream's pairs ``[B, n]`` with this sequence's ``e`` new ones appended
        (``[B, n + e]``), their keys taken out of the noise ids (``[B, N]`` -> ``[B, N - e]``)
        and their values from the stream's ``table`` ``[B, V/2 - 1]``."""
        shuffle = torch.rand(noise_ids.shape, generator=generator).argsort(-1)
        noise_ids = noise_ids.gather(1, shuffle)
        new_keys, noise_ids = noise_ids[:, : self.new_pairs], noise_ids[:, self.new_pairs :]
        new_values = table.gather(1, new_keys - 1)
        return torch.cat([keys, new_keys], 1), torch.cat([values, new_values], 1), noise_ids
