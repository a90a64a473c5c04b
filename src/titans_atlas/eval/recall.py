"""Recall at a controlled distance as an evaluation task (``kv-recall``), and
``batch_accuracy`` for the seeded batches of ``titans_atlas.tasks`` (``kv_recall_batch``,
``passkey_batch``, ``sniah_batch``, ``babilong_style_batch``, ``mqar_batch``: their one home;
the names still import from here)."""

from __future__ import annotations

from pathlib import Path

import torch

from .. import tasks
from ..tasks import Batch, kv_recall_batch
from ..tokenizers import Tokenizer
from .inference import DEFAULT_PIECE, Evaluator
from .mqar import batch_rows, check_vocab, labelled_accuracy
from .plots import curves, plot_title
from .registry import EvalSettings, Scoring, mean_by

# the batch builders' old home: ``from titans_atlas.eval.recall import passkey_batch`` works
_BUILDERS = ("babilong_style_batch", "mqar_batch", "passkey_batch", "prompt_answer_batch")
_BUILDERS += ("sniah_batch",)


def __getattr__(name: str):
    if name in _BUILDERS:
        return getattr(tasks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def batch_accuracy(model, batch: Batch, piece_size: int = DEFAULT_PIECE) -> float:
    """Fraction of a batch's labelled tokens the model predicts by argmax (a multi-token
    answer counts each of its tokens)."""
    logits = Evaluator(model, piece_size=piece_size, check_budget=False).all_logits(batch.input_ids)
    correct, total = labelled_accuracy(logits, batch.labels)
    return correct / max(1, total)


# --- task ------------------------------------------------------------------------------------

DEFAULT_DISTANCES = (16, 64, 256)


def _kv_samples(settings: EvalSettings, tokenizer: Tokenizer):
    vocab = int(settings.extra.get("vocab_size", tokenizer.vocab_size))
    pairs = settings.kv_pairs or 1
    for distance in settings.distances or DEFAULT_DISTANCES:
        seq_len = max(settings.lengths) if settings.lengths else distance + 2 * pairs + 8
        batch = kv_recall_batch(
            settings.samples,
            seq_len,
            distance,
            vocab,
            seed=settings.seed + distance,
            num_pairs=pairs,
        )
        yield from batch_rows(
            batch, length=seq_len, distance=distance, kv_pairs=pairs, vocab_size=vocab
        )


def _kv_score(evaluator: Evaluator, tokenizer: Tokenizer, sample: dict, settings: EvalSettings):
    check_vocab(sample, evaluator)
    logits = evaluator.all_logits(torch.tensor([sample["input_ids"]]))
    prediction = int(logits[0, -1].argmax())
    fields = ("distance", "length", "kv_pairs", "vocab_size", "index")
    return {
        **{k: sample[k] for k in fields},
        "target": sample["labels"][-1],
        "prediction": prediction,
        "window": getattr(evaluator.model.config, "window", None),
        "score": float(prediction == sample["labels"][-1]),
    }


def _kv_summarize(outcomes: list[dict], settings: EvalSettings) -> dict:
    distances = sorted({o["distance"] for o in outcomes})
    by_distance = mean_by(outcomes, "distance")
    window = outcomes[0]["window"] if outcomes else None
    return {
        "distances": distances,
        "distance_in_windows": [d / window for d in distances] if window else None,
        "accuracy": [round(100 * by_distance[(d,)], 2) for d in distances],
        "chance": round(100 / max(1, outcomes[0]["vocab_size"] // 2), 3) if outcomes else None,
        "window": window,
        "metric": "accuracy x100 of the argmax at the query",
    }


def _kv_plot(result: dict, path: Path) -> None:
    summary = result["summary"]
    in_windows = summary["distance_in_windows"]
    curves(
        {"accuracy": (in_windows or summary["distances"], summary["accuracy"])},
        path,
        title=plot_title(result),
        xlabel="distance (attention windows)" if in_windows else "distance (tokens)",
        ylabel="accuracy (%)",
        logx=True,
        vlines=[(1.0, "window")] if in_windows else (),
    )


Scoring(_kv_score, _kv_summarize, _kv_plot).register(
    name="kv-recall",
    label="Key-value recall at controlled distance",
    description="recall of a value a set number of tokens back, for models trained on it",
    samples=_kv_samples,
)
