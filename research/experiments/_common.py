"""What the experiment scripts share: their command line, the quiet one-thread training
settings, one JSON line per run appended to a results file (or ``--plot`` to draw and
tabulate that file instead of running), and evaluating a finished run again, optionally with
the memory's decay floor lowered."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from titans_atlas.eval.loading import load_checkpoint
from titans_atlas.layers.neural_memory import NeuralMemory

# every experiment trains quietly on one thread, so two runs can go side by side
QUIET = ["train.progress=false", "train.threads=1", "train.sample_tokens=0"]


def experiment_parser(doc: str, results: Path, steps: int, steps_help: str | None = None):
    """The options every experiment takes: --model, --seed, --steps, --set, --results,
    --plot (the script adds its own)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--model", default="lmm")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=steps, help=steps_help)
    parser.add_argument("--set", action="append", default=[], help="config override key=value")
    parser.add_argument("--results", type=Path, default=results)
    parser.add_argument("--plot", action="store_true", help="plot and tabulate --results")
    return parser


def run_or_plot(
    args: argparse.Namespace,
    run: Callable[[argparse.Namespace], dict],
    plot: Callable[[Path, Path], None],
) -> None:
    """``--plot``: draw ``args.results`` into the PNG beside it. Otherwise run once and
    append the record to ``args.results``."""
    if args.plot:
        plot(args.results, args.results.with_suffix(".png"))
        return
    record = run(args)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    with args.results.open("a") as handle:
        handle.write(json.dumps(record) + "\n")
    print(json.dumps(record))


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def add_evaluation_options(parser: argparse.ArgumentParser) -> None:
    """--evaluate-only and --test-decay-min, for scripts whose runs can be evaluated again."""
    parser.add_argument(
        "--evaluate-only", action="store_true",
        help="evaluate the finished run of these options instead of training it again",
    )  # fmt: skip
    parser.add_argument(
        "--test-decay-min", type=float, default=None,
        help="evaluate with the memory's decay floor at this value (trained with the config's)",
    )  # fmt: skip


def evaluation_overrides(args: argparse.Namespace) -> list[str]:
    """How the evaluated model differs from the trained one, for the record's overrides (so
    tables and plots show it as its own arm), never for the run directory."""
    return [] if args.test_decay_min is None else [f"test:model.decay_min={args.test_decay_min:g}"]


def load_finished(run_dir: Path, steps: int) -> torch.nn.Module:
    """The model of a run that finished ``steps`` (its last checkpoint); a ValueError when
    the run directory holds no finished run. Sets torch to one thread, as training does
    (``QUIET``), so evaluations can go side by side too."""
    latest = run_dir / "checkpoints" / "latest.json"
    info = json.loads(latest.read_text()) if latest.exists() else {}
    if info.get("step") != steps:
        raise ValueError(
            f"--evaluate-only needs a run that finished {steps} steps in {run_dir} "
            f"(found {info.get('step', 'none')}); run the same command without it first"
        )
    torch.set_num_threads(1)
    return load_checkpoint(run_dir / "checkpoints" / info["dir"]).model


def set_decay_floor(model: torch.nn.Module, floor: float) -> None:
    """Every memory layer's decay gate bounded below by ``floor`` from now on: alpha =
    floor + (1 - floor) sigmoid(.). Only that gate changes; the trained weights stay."""
    for layer in model.modules():
        if isinstance(layer, NeuralMemory):
            layer.config = replace(layer.config, decay_min=floor)


def short_override(override: str) -> str:
    """``model.decay_min=0.0001`` -> ``decay_min=0.0001``; ``test:`` overrides keep "test"."""
    key, _, value = override.partition("=")
    prefix = "test " if key.startswith("test:") else ""
    return f"{prefix}{key.rsplit('.', 1)[-1]}={value}"
