"""MQAR as an evaluation task (Arora et al. 2023, zoology's ``multiquery_ar``): the batches are
``titans_atlas.tasks.mqar``'s (how they are drawn is said there); the metric is the accuracy of
the argmax prediction over the labelled positions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch

from ..tasks.base import IGNORE, Batch
from ..tasks.mqar import mqar_batch
from ..tokenizers import Tokenizer
from .inference import Evaluator
from .plots import curves, plot_title
from .registry import EvalSettings, Scoring


def labelled_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> tuple[int, int]:
    """(correct, labelled) argmax predictions of ``logits [B, T, V]`` at ``labels != -100``."""
    mask = labels != IGNORE
    correct = (logits.argmax(dim=-1) == labels.to(logits.device)) & mask.to(logits.device)
    return int(correct.sum()), int(mask.sum())


# --- task ------------------------------------------------------------------------------------

DEFAULT_LENGTHS = (64, 128, 256)


def batch_rows(batch: Batch, length: int, **fields) -> Iterator[dict]:
    """One sample per row of a task batch: ``fields``, the row's index, ids and labels, and
    ``num_tokens = length``."""
    for index in range(batch.input_ids.shape[0]):
        yield {
            "length": length,
            **fields,
            "index": index,
            "input_ids": batch.input_ids[index].tolist(),
            "labels": batch.labels[index].tolist(),
            "num_tokens": length,
        }


def check_vocab(sample: dict, evaluator: Evaluator, what: str = "vocab_size") -> None:
    """A sample's ids must fit the model's vocabulary (ValueError naming both)."""
    if sample["vocab_size"] > evaluator.vocab_size:
        raise ValueError(
            f"{what} {sample['vocab_size']} exceeds the model's {evaluator.vocab_size}"
        )


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
        yield from batch_rows(batch, length=length, kv_pairs=pairs, vocab_size=vocab)


def _score(evaluator: Evaluator, tokenizer: Tokenizer, sample: dict, settings: EvalSettings):
    check_vocab(sample, evaluator, "MQAR vocab_size")
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
        title=plot_title(result),
        xlabel="sequence length (tokens)",
        ylabel="accuracy (%)",
        logx=True,
    )


Scoring(_score, _summarize, _plot).register(
    name="mqar",
    label="MQAR (zoology multi-query associative recall)",
    description="multi-query associative recall, for models trained on it",
    samples=_samples,
)
