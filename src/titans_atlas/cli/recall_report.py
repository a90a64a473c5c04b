"""The end of a run on a recall task (``data.source = "task:kv_multi"`` or
``"task:kv_distance"``): recall
accuracy against the distance to the answer, in attention windows, and past the training
length, for the trained model and for a control (``train.control``, e.g. ``"swa"``) trained
with the same settings -- what ``titans train --preset recall`` prints (research/LOG.md).

Writes ``recall.json`` and, with matplotlib, ``recall.png`` into the run directory.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ..eval.distance import format_recall_table, recall_by_distance
from ..eval.plots import curves
from ..train.config import RunConfig

RECALL_SOURCES = ("task:kv_multi", "task:kv_distance")  # ids as eval.recall.kv_recall_batch
WINDOWS = (0.5, 1, 2, 4, 8, 16)  # distances, in attention windows, at the training length
LENGTHS = (2, 4, 8, 16)  # test lengths, in training lengths


def is_recall_run(config: RunConfig) -> bool:
    return config.data.source in RECALL_SOURCES


def control_config(config: RunConfig, run_dir: Path) -> RunConfig:
    """The same run with ``train.control``'s model, into ``RUN_DIR/control``."""
    model = replace(config.model, name=config.train.control)
    loop = replace(config.train, out_dir=str(run_dir / "control"), control=None)
    return replace(config, model=model, train=loop)


def measure(model, config: RunConfig, samples: int) -> dict:
    window, length = model.config.window, config.train.seq_len
    distances = sorted({min(length - 2, max(1, round(w * window))) for w in WINDOWS})
    args = config.data.task_args
    return recall_by_distance(
        model,
        distances,
        [n * length for n in LENGTHS],
        train_length=length,
        vocab_size=args.get("vocab_size", 32),
        num_pairs=args.get("num_pairs", 4),
        samples=samples,
        seed=1000 + config.train.seed,
    )


def report(models: dict, config: RunConfig, run_dir: Path, samples: int = 100) -> str:
    """Measure every ``{label: model}``, write recall.json / recall.png, return the table."""
    results = {label: measure(model, config, samples) for label, model in models.items()}
    window = next(iter(models.values())).config.window
    chance = 1 / (config.data.task_args.get("vocab_size", 32) // 2)
    record = {
        "window": window,
        "train_length": config.train.seq_len,
        "chance": chance,
        "samples": samples,
        "models": {k: {axis: {str(x): a for x, a in v[axis].items()} for axis in v}
                   for k, v in results.items()},
    }  # fmt: skip
    (run_dir / "recall.json").write_text(json.dumps(record, indent=1))
    plotted = _plot(results, window, chance, run_dir / "recall.png")
    return f"{format_recall_table(results, window, chance)}\n{plotted}"


def _plot(results: dict, window: int, chance: float, path: Path) -> str:
    """Draw recall.png; without matplotlib (the [train] or [eval] extra) say so instead."""
    series = {
        label: ([d / window for d in r["distance"]], [100 * a for a in r["distance"].values()])
        for label, r in results.items()
    }
    xs = next(iter(series.values()))[0]
    series["chance"] = (xs, [100 * chance] * len(xs))
    try:
        curves(series, path, title="recall by distance", xlabel="distance (attention windows)",
               ylabel="accuracy (%)", logx=True, vlines=[(1.0, "window")])  # fmt: skip
    except ImportError as err:
        return f"no plot: {err}"
    return f"plot: {path}"
