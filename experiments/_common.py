"""What the experiment scripts share: one JSON line per run appended to a results file, or
``--plot`` to draw and tabulate that file instead of running."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path


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
