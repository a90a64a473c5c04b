"""Multi-query associative recall (MQAR; Arora et al. 2023, zoology's ``multiquery_ar``).

Keys come from [1, V/2) and values from [V/2, V), drawn without replacement; the context is
``k1 v1 k2 v2 ...``; each key comes back once as a query after the context, at a gap drawn
with p(i) proportional to i^(a-1), a = 0.01 (queries cluster early); the label is the value
that followed the key, -100 elsewhere; every other position holds a random token (zoology's
``random_non_queries``). Constraints: L even, V > L, 4 * pairs <= L. Metric: accuracy of the
argmax prediction over the labelled positions.

Zoology draws with numpy's global RNG; here each batch has its own ``numpy.random.Generator``
seeded by ``seed``, so the samples match zoology's distribution, not its exact draws.
"""

from __future__ import annotations

import numpy as np
import torch

from .base import IGNORE, Batch


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
    if seq_len < 2 or seq_len % 2:
        raise ValueError(f"seq_len must be even and >= 2, got {seq_len}")
    if vocab_size <= seq_len:
        raise ValueError(f"vocab_size must exceed seq_len, got {vocab_size} <= {seq_len}")
    if num_kv_pairs < 1 or 4 * num_kv_pairs > seq_len:
        raise ValueError(f"num_kv_pairs must lie in [1, seq_len / 4], got {num_kv_pairs}")
    if batch_size < 1 or not 0 < power_a <= 1:
        raise ValueError(
            f"batch_size must be >= 1 and power_a in (0, 1], got {batch_size}, {power_a}"
        )
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
