"""No silent regressions: the hot paths timed at the working tree against a base revision.

Each measurement runs in its own process: a revision's ``src`` first on the path, this
directory's benchmark code (the same workload for both sides), one case, ``--threads``
threads. The process checks that it imported ``titans_atlas`` from the revision it was
meant to (and, for the base, that the checkout is at that commit). The two sides alternate
``--pairs`` times per case, the order flipping each pair, so that a shared machine's drifts
hit both alike. Cases (each built by the benchmark it comes from):

* titans: ``memory_scan.py``'s Titans geometry, forward+backward (dim 384, one head, MLP
  384 -> 1536 -> 384, chunk 64, 2,048 tokens).
* atlas: ``memory_scan.py``'s issue-3 ATLAS geometry, forward+backward (4 heads x 64,
  residual MLP 64 -> 256 -> 64, per-token Muon, Omega window 8, chunk 8, 512 tokens).
* train: one eager MAC training step, ``models.py``'s ``train_step`` (dim 256, depth 2,
  window 128, chunk 64, 1,024 bytes, no optimizer).
* decode: MAC greedy decoding, ``generation.py``'s ``measure`` (dim 256, depth 4, window 256,
  chunk 64): the median of 64 single-token steps after a 1,024-token prefill.

A process times ``--repeats`` calls after one warm-up (decode: its 64 tokens after 4). With
one thread it compares the process's CPU time per call (``--clock cpu``, the default then),
which leaves out the waits for a core that dominate wall time on a loaded machine. The table
gives each side's median, the median of the per-pair ratios base/HEAD (> 1: HEAD is faster),
their range and the wall-time ratio, and flags a case whose ratio says HEAD is more than
``--threshold`` slower. ``--new REV`` times a revision instead of the working tree
(bisecting). A base revision older than the current API gets a stand-in for what moved
(``titans_atlas.generate`` for ``titans_atlas.generation``); the table names it.

    python benchmarks/regress.py --base 7cb7422                       # every case
    python benchmarks/regress.py --base 7cb7422 --cases atlas --pairs 3 --repeats 2
    python benchmarks/regress.py --base HEAD --cases atlas --quick    # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
REPO = BENCHMARKS.parent
RESULTS = BENCHMARKS / "results"
CASES = {
    "titans": "memory fwd+bwd, Titans geometry",
    "atlas": "memory fwd+bwd, ATLAS geometry",
    "train": "MAC training step",
    "decode": "MAC decoding, per token",
}
WORKING_TREE = "working-tree"


# --- the child: one side, one case --------------------------------------------------------


def import_revision(root: Path, expect: str) -> list[str]:
    """Import ``titans_atlas`` from ``root/src`` (this directory's benchmark modules next);
    raise unless it came from there and ``root`` is at commit ``expect``. Returns the
    stand-ins installed for modules that ``root``'s revision does not have yet."""
    sys.path[:0] = [str(root / "src"), str(BENCHMARKS)]
    import titans_atlas

    imported = Path(titans_atlas.__file__).resolve()
    if not imported.is_relative_to((root / "src").resolve()):
        raise RuntimeError(f"imported {imported}, not the revision at {root}")
    if expect != WORKING_TREE:
        head = git("rev-parse", "HEAD", cwd=root)
        if head != expect:
            raise RuntimeError(f"{root} is at {head}, not at {expect}")
    return _stand_ins()


def _stand_ins() -> list[str]:
    """Older revisions: ``titans_atlas.generation`` was the module ``titans_atlas.generate``
    (without ``compiled_decode_step``, which the eager cases never call)."""
    import importlib
    import importlib.util
    import types

    if importlib.util.find_spec("titans_atlas.generation") is not None:
        return []
    old = importlib.import_module("titans_atlas.generate")
    shim = types.ModuleType("titans_atlas.generation")
    shim.__dict__.update({k: v for k, v in vars(old).items() if not k.startswith("__")})

    def missing(*args, **kwargs):
        raise NotImplementedError("compiled_decode_step: not in this revision")

    shim.__dict__.setdefault("compiled_decode_step", missing)
    sys.modules["titans_atlas.generation"] = shim
    return ["titans_atlas.generation = titans_atlas.generate"]


def time_case(case: str, repeats: int, threads: int, quick: bool) -> dict:
    """Seconds per call (decode: per token) of ``case``, built by its own benchmark module."""
    import _harness

    _harness.set_threads(threads)
    if case == "decode":
        import torch

        import generation
        import titans_atlas as ta

        tiny = ["--quick", "--dim", "32", "--depth", "1", "--heads", "2", "--window", "16"]
        args = generation.parse_args([*tiny, "--chunk-size", "8"] if quick else [])
        args.retries, args.max_wait_s = 0, 0.0  # alternation, not waiting, handles the load
        torch.manual_seed(0)
        model = ta.create_model("mac", **generation.model_size(args)).eval()
        row = generation.measure(model, args.contexts[0], args)
        return {
            "wall_s": row["decode_ms_median"] / 1e3,
            "cpu_s": row["decode_cpu_ms_median"] / 1e3,
            "other_cpu_s": row["other_cpu_s"],
            "tokens": 1,
        }
    if case == "train":
        import models

        args = models.parse_args(["--threads", str(threads)] + (["--quick"] if quick else []))
        step, tokens = models.train_step("mac", args, False), args.batch * args.train_tokens
    else:
        import memory_scan

        config = memory_scan.CONFIGS[case]
        tokens = (32 if case == "atlas" else 128) if quick else config["tokens"]
        step = memory_scan.build_step(config, "fwdbwd", "chunk", tokens)
    timing = _harness.time_callable(step, warmup=1, repeats=repeats)
    return {
        "wall_s": timing.median_s,
        "cpu_s": timing.cpu_median_s,
        "other_cpu_s": timing.other_cpu_s,
        "tokens": tokens,
    }


def child(args: argparse.Namespace) -> None:
    stand_ins = import_revision(args.child, args.expect)
    import titans_atlas

    result = time_case(args.cases[0], args.repeats, args.threads, args.quick)
    result |= {"imported": titans_atlas.__file__, "stand_ins": stand_ins}
    result["median_s"] = result[f"{args.clock}_s"]
    print(json.dumps(result))


# --- the parent: checkouts, alternation, the table ---------------------------------------


def git(*argv: str, cwd: Path = REPO) -> str:
    done = subprocess.run(["git", *argv], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def run_side(root: Path, expect: str, case: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(root)]
    command += ["--expect", expect, "--cases", case, "--repeats", str(args.repeats)]
    command += ["--threads", str(args.threads), "--clock", args.clock]
    command += ["--quick"] if args.quick else []
    env = os.environ | {"OMP_NUM_THREADS": str(args.threads)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        raise RuntimeError(f"{case} at {root} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(result["imported"]).resolve().is_relative_to((root / "src").resolve()):
        raise RuntimeError(f"{case}: the child imported {result['imported']}, not {root}")
    return result


def compare(args: argparse.Namespace) -> dict:
    """Alternate base and working tree ``args.pairs`` times per case; per-pair ratios."""
    import revisions

    base_commit = git("rev-parse", "--verify", f"{args.base}^{{commit}}")
    new_commit = git("rev-parse", "--verify", f"{args.new}^{{commit}}") if args.new else None
    report = {"base": args.base, "base_commit": base_commit, "new": args.new or "HEAD"}
    report |= {"head": new_commit or git("rev-parse", "HEAD"), "cases": {}}
    report["dirty"] = not args.new and bool(git("status", "--porcelain", "--untracked-files=no"))
    with tempfile.TemporaryDirectory() as scratch:
        base = revisions.checkout(base_commit, Path(scratch) / "base")
        new = revisions.checkout(new_commit, Path(scratch) / "new") if new_commit else REPO
        try:
            for case in args.cases:
                rounds = []
                for pair in range(args.pairs):
                    sides = [("base", base, base_commit), ("head", new, new_commit or WORKING_TREE)]
                    measured = {
                        name: run_side(root, expect, case, args)
                        for name, root, expect in (sides if pair % 2 == 0 else sides[::-1])
                    }
                    rounds.append(measured)
                    print(
                        f"  {case} pair {pair + 1}: base {1e3 * measured['base']['median_s']:.1f}"
                        f" ms, {report['new']} {1e3 * measured['head']['median_s']:.1f} ms",
                        flush=True,
                    )
                report["cases"][case] = summarize(rounds, args.threshold)
        finally:
            for tree in {base, new} - {REPO}:
                git("worktree", "remove", "--force", str(tree))
    return report


def summarize(rounds: list[dict], threshold: float) -> dict:
    ratios = [r["base"]["median_s"] / r["head"]["median_s"] for r in rounds]
    ratio = statistics.median(ratios)
    summary = {"ratio": ratio, "ratios": ratios, "slower": ratio < 1 / (1 + threshold)}
    summary["wall_ratio"] = statistics.median(
        r["base"]["wall_s"] / r["head"]["wall_s"] for r in rounds
    )
    for side in ("base", "head"):
        seconds = statistics.median(r[side]["median_s"] for r in rounds)
        summary[side] = {
            "median_s": seconds,
            "tokens_per_s": rounds[0][side]["tokens"] / seconds,
            "other_cpu_s": max(r[side]["other_cpu_s"] for r in rounds),
            "stand_ins": rounds[0][side]["stand_ins"],
        }
    return summary


def table(report: dict, threshold: float) -> str:
    new = report["new"]
    lines = [
        f"base {report['base']} ({report['base_commit'][:7]}) against {new} "
        f"({report['head'][:7]}{' + uncommitted changes' if report['dirty'] else ''})",
        f"| case | base median | {new} median | ratio base/{new} | range | wall-time ratio | |",
        "|---|---|---|---|---|---|---|",
    ]
    for case, s in report["cases"].items():
        cells = [f"{case}: {CASES[case]}"]
        for side in ("base", "head"):
            cells.append(f"{_ms(s[side]['median_s'])} ({s[side]['tokens_per_s']:,.1f} tok/s)")
        cells += [f"{s['ratio']:.3f}", f"{min(s['ratios']):.3f}-{max(s['ratios']):.3f}"]
        cells.append(f"{s['wall_ratio']:.3f}")
        cells.append(f"SLOWER (> {100 * threshold:.0f}%)" if s["slower"] else "ok")
        lines.append("| " + " | ".join(cells) + " |")
    shims = {x for s in report["cases"].values() for x in s["base"]["stand_ins"]}
    if shims:
        lines.append(f"base stand-ins: {'; '.join(sorted(shims))}")
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 10 else f"{1e3 * seconds:.1f} ms"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", help="the revision to compare the working tree against")
    p.add_argument("--new", help="a revision to time instead of the working tree (bisecting)")
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    p.add_argument("--pairs", type=int, default=3, help="alternations per case")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per process")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--threshold", type=float, default=0.05, help="flag HEAD slower than this")
    p.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        help="time compared: the process's CPU time (default with one thread) or wall time",
    )
    p.add_argument("--quick", action="store_true", help="smoke run: tiny sizes, 1 pair")
    p.add_argument("--out", type=Path, default=RESULTS / "regress.json")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--expect", default=WORKING_TREE, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.pairs < 1 or args.repeats < 1 or args.threads < 1:
        p.error("--pairs, --repeats and --threads must be >= 1")
    if args.threshold < 0:
        p.error("--threshold must be >= 0")
    if args.child is None and not args.base:
        p.error("--base is required")
    if args.clock is None:
        args.clock = "cpu" if args.threads == 1 else "wall"
    if args.quick and args.child is None:
        args.pairs, args.repeats = 1, 1
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child is not None:
        child(args)
        return
    start = time.perf_counter()
    report = compare(args)
    text = table(report, args.threshold)
    print("\n" + text)
    print(
        f"({args.clock} time; {args.pairs} pair(s) x {args.repeats} repeats, "
        f"{args.threads} thread(s), "
        f"{time.perf_counter() - start:.0f} s)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report | {"table": text}, indent=2))


if __name__ == "__main__":
    main()
