"""One model's training step at two revisions of this repository, side by side: the way to
measure what a change to the hot path is worth on a shared machine.

Each side runs in its own process (a revision's ``src`` and ``benchmarks`` first on the path,
so each imports its own code), the sides alternate ``--pairs`` times, and each process times
``--repeats`` steps of ``benchmarks/models.py``'s ``train_step`` (dim 256, depth 2, window 128,
chunk 64, 1,024 bytes, fp32, one thread) after two warm-up steps. Reports the median step of
each side and the median of the per-pair speed-ups (base time / new time).

    python benchmarks/revisions.py --base 8da2b6a                 # the working tree vs 8da2b6a
    python benchmarks/revisions.py --base 8da2b6a --new 152752e --model mac --pairs 4
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child(root: Path, model: str, repeats: int) -> None:
    """Print the median seconds of ``repeats`` training steps of ``model`` at ``root``."""
    sys.path[:0] = [str(root / "src"), str(root / "benchmarks")]
    import torch

    import models
    import titans_atlas

    if not Path(titans_atlas.__file__).resolve().is_relative_to(root.resolve()):
        raise RuntimeError(f"imported {titans_atlas.__file__}, not the revision at {root}")
    torch.set_num_threads(1)
    step = models.train_step(model, models.parse_args(["--threads", "1"]), False)
    step(), step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(statistics.median(times))


def step_seconds(root: Path, args: argparse.Namespace) -> float:
    command = [sys.executable, __file__, "--child", str(root), "--model", args.model]
    command += ["--repeats", str(args.repeats)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def checkout(revision: str, directory: Path) -> Path:
    """A detached worktree of ``revision`` in ``directory``."""
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(directory), revision],
        check=True,
        capture_output=True,
    )
    return directory


def compare(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        base = checkout(args.base, Path(scratch) / "base")
        new = checkout(args.new, Path(scratch) / "new") if args.new else REPO
        try:
            rounds = [
                (step_seconds(base, args), step_seconds(new, args)) for _ in range(args.pairs)
            ]
        finally:
            for tree in {base, new} - {REPO}:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)])
    speedups = [old / now for old, now in rounds]
    return {
        "base_ms": 1e3 * statistics.median(old for old, _ in rounds),
        "new_ms": 1e3 * statistics.median(now for _, now in rounds),
        "speedup": statistics.median(speedups),
        "range": (min(speedups), max(speedups)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", help="the revision to compare against (required)")
    p.add_argument("--new", help="the revision measured against it (default: the working tree)")
    p.add_argument("--model", default="mac")
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.pairs < 1 or args.repeats < 1:
        p.error("--pairs and --repeats must be >= 1")
    if args.child:
        child(args.child, args.model, args.repeats)
        return
    if not args.base:
        p.error("--base is required")
    result = compare(args)
    low, high = result["range"]
    print(
        f"{args.model}: base {args.base} {result['base_ms']:.0f} ms, "
        f"new {args.new or 'working tree'} {result['new_ms']:.0f} ms; speed-up "
        f"{result['speedup']:.3f} (range {low:.3f}-{high:.3f}, {args.pairs} pairs)"
    )


if __name__ == "__main__":
    main()
