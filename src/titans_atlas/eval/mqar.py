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

from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from ..tokenizer import Tokenizer
from .inference import Evaluator
from .plots import curves
from .registry import EvalSettings, Task, register_task

IGNORE = -100


class Batch(NamedTuple):
    """A training / evaluation batch. ``labels[:, t]`` is the token that should follow
    ``input_ids[:, t]`` (already shifted), or -100 where nothing is scored:
    ``loss = cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)``."""

    input_ids: torch.Tensor  # [B, T] int64
    labels: torch.Tensor  # [B, T] int64


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


def labelled_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> tuple[int, int]:
    """(correct, labelled) argmax predictions of ``logits [B, T, V]`` at ``labels != -100``."""
    mask = labels != IGNORE
    correct = (logits.argmax(dim=-1) == labels.to(logits.device)) & mask.to(logits.device)
    return int(correct.sum()), int(mask.sum())


# --- task ------------------------------------------------------------------------------------

DEFAULT_LENGTHS = (64, 128, 256)


def _lengths(settings: EvalSettings, vocab: int) -> tuple[int, ...]:
    """The lengths to run, all checked before the first sample: MQAR needs L even, V > L
    and 4 kv <= L. The defaults keep those that fit the vocabulary (a 256-id model: 64, 128);
    a length that does not fit, given by the user, is an error naming --lengths."""
    if not settings.lengths:
        return tuple(n for n in DEFAULT_LENGTHS if n < vocab) or (min(DEFAULT_LENGTHS),)
    for length in settings.lengths:
        pairs = settings.kv_pairs or max(1, length // 16)
        if length < 2 or length % 2 or length >= vocab or 4 * pairs > length:
            raise ValueError(
                f"MQAR --lengths {length} does not fit: a length must be even, below the "
                f"vocabulary ({vocab}) and at least 4 x --kv-pairs ({pairs})"
            )
    return settings.lengths


def _samples(settings: EvalSettings, tokenizer: Tokenizer):
    vocab = int(settings.extra.get("vocab_size", tokenizer.vocab_size))
    for length in _lengths(settings, vocab):
        pairs = settings.kv_pairs or max(1, length // 16)
        batch = mqar_batch(settings.samples, length, pairs, vocab, seed=settings.seed + 10 + length)
        for index in range(settings.samples):
            yield {
                "length": length,
                "kv_pairs": pairs,
                "vocab_size": vocab,
                "index": index,
                "input_ids": batch.input_ids[index].tolist(),
                "labels": batch.labels[index].tolist(),
                "num_tokens": length,
            }


def _score(evaluator: Evaluator, tokenizer: Tokenizer, sample: dict, settings: EvalSettings):
    if sample["vocab_size"] > evaluator.vocab_size:
        raise ValueError(
            f"MQAR vocab_size {sample['vocab_size']} exceeds the model's {evaluator.vocab_size}"
        )
    logits = evaluator.all_logits(torch.tensor([sample["input_ids"]]))
    correct, total = labelled_accuracy(logits, torch.tensor([sample["labels"]]))
    fields = ("length", "kv_pairs", "vocab_size", "index")
    return {
        **{k: sample[k] for k in fields},
        "correct": correct,
        "labelled": total,
        "score": correct / total,
    }


def _summarize(outcomes: list[dict], settings: EvalSettings) -> dict:
    lengths = sorted({o["length"] for o in outcomes})
    accuracy = []
    for n in lengths:
        chosen = [o for o in outcomes if o["length"] == n]
        accuracy.append(
            round(100 * sum(o["correct"] for o in chosen) / sum(o["labelled"] for o in chosen), 2)
        )
    return {"lengths": lengths, "accuracy": accuracy, "metric": "accuracy x100 over queries"}


def _plot(result: dict, path: Path) -> None:
    summary = result["summary"]
    curves(
        {"MQAR": (summary["lengths"], summary["accuracy"])},
        path,
        title=f"{result['label']}\n{result.get('checkpoint', {}).get('name', '')}".strip(),
        xlabel="sequence length (tokens)",
        ylabel="accuracy (%)",
        logx=True,
    )


register_task(
    Task(
        name="mqar",
        label="MQAR (zoology multi-query associative recall)",
        description="multi-query associative recall, for models trained on it",
        samples=_samples,
        score=_score,
        summarize=_summarize,
        plot=_plot,
    )
)
