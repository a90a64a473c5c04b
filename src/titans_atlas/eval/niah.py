"""Needle in a haystack as evaluation tasks: RULER's single-needle tasks (S-NIAH) and the
classic passkey, over the prompts of ``titans_atlas.tasks.needles`` (their one home)."""

from __future__ import annotations

import random
from pathlib import Path

from ..tasks.needles import (  # noqa: F401  (re-exported: the builders' old home)
    ANSWER_PREFIX,
    NEEDLE,
    NOISE,
    PASSKEY_NEEDLE,
    PASSKEY_QUESTION,
    PASSKEY_TASK,
    TEMPLATE,
    VARIANTS,
    NiahVariant,
    build_niah_sample,
    build_passkey_sample,
    random_value,
)
from ..tokenizers import Tokenizer
from .inference import Evaluator
from .metrics import percent, ruler_string_match_all
from .plots import heatmap, length_label, plot_title
from .registry import EvalSettings, Scoring, mean_by, without_prompt

# --- tasks -----------------------------------------------------------------------------------

NIAH_DEFAULT_LENGTHS = (1024, 2048, 4096)


def _niah_samples(variant: str):
    def samples(settings: EvalSettings, tokenizer: Tokenizer):
        for length in settings.lengths or NIAH_DEFAULT_LENGTHS:
            for depth in settings.depths:
                for index in range(settings.samples):
                    rng = random.Random(f"{settings.seed}:{variant}:{length}:{depth}:{index}")
                    if variant == "passkey":
                        sample = build_passkey_sample(tokenizer, length, rng, depth=depth)
                    else:
                        sample = build_niah_sample(
                            tokenizer,
                            variant,
                            length,
                            rng,
                            depth=depth,
                            haystack_dir=settings.haystack_dir,
                        )
                    yield {**sample, "index": index}

    return samples


def score_generated(
    evaluator: Evaluator, tokenizer: Tokenizer, sample: dict, settings: EvalSettings
) -> dict:
    """Greedy answer after the prompt, scored by RULER's string_match_all (0..1)."""
    budget = settings.max_new_tokens
    if budget is None:  # room for the longest answer and its punctuation
        budget = max(len(tokenizer.encode(" " + a)) for a in sample["answers"]) + 16
    output = evaluator.greedy(tokenizer.encode(sample["prompt"]), budget)
    prediction = tokenizer.decode(output)
    score = ruler_string_match_all(prediction, sample["answers"])
    return {**without_prompt(sample), "prediction": prediction, "score": score}


def summarize_grid(outcomes: list[dict], settings: EvalSettings) -> dict:
    """Accuracy x100 per (depth, length) cell, per length, and overall."""
    lengths = sorted({o["length"] for o in outcomes})
    depths = sorted({o["depth"] for o in outcomes})
    cells = mean_by(outcomes, "depth", "length")
    per_length = mean_by(outcomes, "length")
    return {
        "lengths": lengths,
        "depths": depths,
        "accuracy": [[percent(cells.get((d, n))) for n in lengths] for d in depths],
        "accuracy_by_length": [percent(per_length[(n,)]) for n in lengths],
        "mean": percent(sum(o["score"] for o in outcomes) / max(1, len(outcomes))),
        "metric": "RULER string_match_all x100 (greedy output)",
    }


def plot_grid(result: dict, path: Path) -> None:
    summary = result["summary"]
    heatmap(
        summary["accuracy"],
        [f"{100 * d:.0f}%" for d in summary["depths"]],
        [length_label(n) for n in summary["lengths"]],
        path,
        title=plot_title(result),
        xlabel="context length (tokens)",
        ylabel="needle depth",
    )


GRID = Scoring(score_generated, summarize_grid, plot_grid)  # every needle task
for _name, _variant in {**VARIANTS, "passkey": None}.items():
    GRID.register(
        name=_name,
        label=_variant.label if _variant else "Passkey (Mohtashami & Jaggi 2023)",
        description="needle retrieval: accuracy over context length x needle depth",
        samples=_niah_samples(_name),
    )
