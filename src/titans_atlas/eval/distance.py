"""Recall accuracy against the distance to the answer, for a model in hand (no checkpoint
folder, no JSON): what ``titans train --preset recall`` prints and the recall experiments
tabulate (research/LOG.md). The ``kv-recall`` task of ``titans eval`` measures the same on a
saved checkpoint.

Distances are in tokens; the report divides them by the model's attention window.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .recall import batch_accuracy, kv_recall_batch

ROWS_PER_BATCH = 50  # bounds the evaluation's memory at long lengths


def recall_accuracy(
    model: torch.nn.Module,
    seq_len: int,
    distance: int,
    *,
    vocab_size: int,
    num_pairs: int,
    samples: int,
    seed: int,
) -> float:
    """Fraction of ``samples`` key-value queries (``kv_recall_batch``) answered by argmax,
    the answer ``distance`` tokens before the query at the end of ``seq_len`` tokens."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    correct = 0.0
    for start in range(0, samples, ROWS_PER_BATCH):
        rows = min(ROWS_PER_BATCH, samples - start)
        batch = kv_recall_batch(
            rows, seq_len, distance, vocab_size, seed=seed + 7919 * start, num_pairs=num_pairs
        )
        with torch.no_grad():
            correct += batch_accuracy(model, batch) * rows
    return correct / samples


def recall_by_distance(
    model: torch.nn.Module,
    distances: Sequence[int],
    lengths: Sequence[int] = (),
    *,
    train_length: int,
    vocab_size: int,
    num_pairs: int,
    samples: int = 200,
    seed: int = 1000,
) -> dict[str, dict[int, float]]:
    """``{"distance": {d: accuracy at train_length}, "length": {n: accuracy with the answer
    n - 16 tokens back in n tokens}}`` -- the second measures recall past the training
    length. The model is put in eval mode; each point has its own seed."""
    model.eval()
    near = {
        d: recall_accuracy(model, train_length, d, vocab_size=vocab_size, num_pairs=num_pairs,
                           samples=samples, seed=seed + d)
        for d in distances
    }  # fmt: skip
    far = {
        n: recall_accuracy(model, n, n - 16, vocab_size=vocab_size, num_pairs=num_pairs,
                           samples=samples, seed=seed + n)
        for n in lengths
    }  # fmt: skip
    return {"distance": near, "length": far}


def format_recall_table(
    rows: dict[str, dict[str, dict[int, float]]], window: int, chance: float
) -> str:
    """A plain-text table: one row per model, accuracy (%) per distance (in windows) and
    per length."""
    first = next(iter(rows.values()))
    head = ["model"] + [f"{d / window:g}W" for d in first["distance"]]
    head += [f"L={n}" for n in first["length"]]
    width = max(len(name) for name in [*rows, "model"])
    lines = [f"{head[0]:<{width}}  " + "  ".join(f"{h:>7}" for h in head[1:])]
    for name, result in rows.items():
        cells = [
            f"{100 * a:.0f}%" for a in (*result["distance"].values(), *result["length"].values())
        ]
        lines.append(f"{name:<{width}}  " + "  ".join(f"{c:>7}" for c in cells))
    lines.append(f"chance {100 * chance:.1f}%; W = the attention window ({window} tokens)")
    return "\n".join(lines)
