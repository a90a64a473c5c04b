"""What the experiment scripts share: their command line, the quiet one-thread training
settings, and one JSON line per run appended to a results file, or ``--plot`` to draw and
tabulate that file instead of running."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

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
