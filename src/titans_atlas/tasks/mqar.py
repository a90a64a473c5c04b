"""Multi-query associative recall (MQAR; Arora et al. 2023, zoology's ``multiquery_ar``).

Keys come from [1, V/2) and values from [V/2, V), drawn without replacement; the context is
``k1 v1 k2 v2 ...``; each key comes back once as a query after the context, at a gap drawn
with p(i) proportional to i^(a-1), a = 0.01 (queries cluster early); the label is the value
that followed the key, -100 elsewhere; every other position holds a random token (zoology's
``random_non_queries``). Constraints: L even, V > L, 4 * pairs <= L. Metric: accuracy of the
argmax prediction over the labelled positions.

Zoology draws with numpy's global RNG; here each batch has its own ``numpy.random.Generator``
seeded by ``seed``, so the samples match zoology's distribution, not its exact draws.

* ``mqar_batch``: a seeded batch (the evaluation's ``mqar`` task).
* ``MQAR``: the training task ``task:mqar`` (``train.seq_len`` the sequence length), one
  ``mqar_batch`` per training batch, seeded from the run's generator; validation draws from
  a disjoint set of seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from .base import IGNORE, Batch


def check_mqar(
    seq_len: int, num_kv_pairs: int, vocab_size: int, power_a: float, pairs: str = "num_kv_pairs"
) -> None:
    """MQAR's constraints (L even, V > L, 4 * pairs <= L, a in (0, 1]); a ValueError naming
    the argument that breaks one (the pairs under the caller's name ``pairs``)."""
    if seq_len < 2 or seq_len % 2:
        raise ValueError(f"seq_len must be even and >= 2, got {seq_len}")
    if vocab_size <= seq_len:
        raise ValueError(f"vocab_size must exceed seq_len, got {vocab_size} <= {seq_len}")
    if num_kv_pairs < 1 or 4 * num_kv_pairs > seq_len:
        raise ValueError(
            f"{pairs} must lie in [1, seq_len / 4 = {seq_len // 4}], got {num_kv_pairs}"
        )
    if not 0 < power_a <= 1:
        raise ValueError(f"power_a must lie in (0, 1], got {power_a}")


def mqar_batch(
    batch_size: int,
    seq_len: int,
    num_kv_pairs: int,
    vocab_size: int,
    *,
    seed: int,
    power_a: float = 0.01,
    random_non_queries: bool = True,
) -> Batch:
    """``batch_size`` MQAR sequences of ``seq_len`` tokens with ``num_kv_pairs`` pairs."""
    check_mqar(seq_len, num_kv_pairs, vocab_size, power_a)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rng = np.random.default_rng(seed)
    context = 2 * num_kv_pairs
    space = (seq_len - context) // 2
    gap_p = power_a * np.arange(1, space + 1) ** (power_a - 1)
    gap_p /= gap_p.sum()
    sequences = np.zeros((batch_size, seq_len + 1), dtype=np.int64)
    targets = np.full((batch_size, seq_len + 1), IGNORE, dtype=np.int64)
    for row in range(batch_size):
        keys = rng.choice(np.arange(1, vocab_size // 2), num_kv_pairs, replace=False)
        values = rng.choice(np.arange(vocab_size // 2, vocab_size), num_kv_pairs, replace=False)
        sequences[row, 0:context:2], sequences[row, 1:context:2] = keys, values
        gaps = rng.choice(space, num_kv_pairs, replace=False, p=gap_p)
        sequences[row, context + 2 * gaps] = keys
        targets[row, context + 2 * gaps + 1] = values
    inputs, labels = torch.from_numpy(sequences[:, :-1]), torch.from_numpy(targets[:, 1:])
    if random_non_queries:
        noise = torch.from_numpy(rng.integers(0, vocab_size, size=inputs.shape))
        inputs = torch.where(inputs == 0, noise, inputs)
    return Batch(inputs.contiguous(), labels.contiguous())


SPLITS = ("train", "validation")


@dataclass(frozen=True)
class MQAR:
    """Zoology's MQAR as a training task (``data.source = "task:mqar"``): every batch is one
    ``mqar_batch`` of ``seq_len`` tokens (``train.seq_len``) with ``num_pairs`` pairs over
    ``vocab_size`` ids, its numpy seed drawn from the run's ``torch.Generator`` (so a run is
    reproducible and resumes exactly). Every labelled position is a query's answer.

    Held out: training batches use even numpy seeds, ``validation()`` (the task a run's
    validation draws from) odd ones, so no validation batch is a training batch's draw."""

    seq_len: int
    vocab_size: int = 8192
    num_pairs: int = 8
    power_a: float = 0.01
    random_non_queries: bool = True
    split: str = "train"  # "train" | "validation": which half of the seeds

    def __post_init__(self) -> None:
        for name in ("seq_len", "vocab_size", "num_pairs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        if isinstance(self.power_a, bool) or not isinstance(self.power_a, int | float):
            raise ValueError(f"power_a must be a number, got {self.power_a!r}")
        if not isinstance(self.random_non_queries, bool):
            raise ValueError(
                f"random_non_queries must be true or false, got {self.random_non_queries!r}"
            )
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {self.split!r}")
        check_mqar(self.seq_len, self.num_pairs, self.vocab_size, self.power_a, "num_pairs")

    def validation(self) -> MQAR:
        """The same task on the held-out (odd) seeds."""
        return replace(self, split="validation")

    def sample(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        draw = int(torch.randint(1 << 62, (1,), generator=generator))
        batch = mqar_batch(
            batch_size,
            self.seq_len,
            self.num_pairs,
            self.vocab_size,
            seed=2 * draw + SPLITS.index(self.split),
            power_a=float(self.power_a),
            random_non_queries=self.random_non_queries,
        )
        return batch.input_ids, batch.labels
