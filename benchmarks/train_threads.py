"""The eager training step at one thread against N, alternating in one process (issue 36,
"Use the cores": at two threads the eager step should be at least 1.5x its one-thread speed).

Each round times the benchmark model's training step (``models.train_step``: forward,
backward, value checks off, as ``titans train`` runs it) once at one thread and once at
``--threads``, each on its second call in a row, so both counts meet the same load. The
medians over ``--rounds`` are printed per model. Eager only: inductor fixes a kernel's
OpenMP team when it compiles, so a compiled step cannot change its count in one process
(``decode_threads.py --compiled`` runs separate processes for that).

    python benchmarks/train_threads.py --models mac lmm --rounds 5
    python benchmarks/train_threads.py --models mac --rounds 1 --profile 25
"""

from __future__ import annotations

import argparse
import statistics

import torch

import _harness
from models import _warm_timed, parse_args, train_step


def timed(step, threads: int) -> float:
    """Seconds of ``step`` at ``threads`` (the first call after a switch is not timed)."""
    torch.set_num_threads(threads)
    return _warm_timed(step)


def profile(step, threads: int, top: int) -> None:
    """Self CPU ms per step of the ``top`` ops at one thread, beside ``threads``: which ops
    the second thread speeds up (docs/benchmarks.md)."""
    per_op = {}
    for count in (1, threads):
        torch.set_num_threads(count)
        step()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            step()
        per_op[count] = {e.key: (e.self_cpu_time_total / 1e3, e.count) for e in prof.key_averages()}
    print(f"| op | calls | ms, 1 thread | ms, {threads} threads | speed-up |")
    print("|---|---|---|---|---|")
    for key in sorted(per_op[1], key=lambda k: -per_op[1][k][0])[:top]:
        (one, calls), many = per_op[1][key], per_op[threads].get(key, (0.0, 0))[0]
        ratio = f"{one / many:.2f}x" if many else "--"
        print(f"| `{key}` | {calls} | {one:.1f} | {many:.1f} | {ratio} |")


def eager_step(name: str, train_tokens: int):
    """The benchmark model's eager training step (``models.train_step``)."""
    args = parse_args(["--models", name, "--train-tokens", str(train_tokens)])
    return train_step(name, args, compiled=False)


def measure(name: str, threads: int, rounds: int, train_tokens: int) -> dict:
    step = eager_step(name, train_tokens)
    times: dict[int, list[float]] = {1: [], threads: []}
    for _ in range(rounds):
        for count in (1, threads):
            times[count].append(timed(step, count))
    one, many = statistics.median(times[1]), statistics.median(times[threads])
    return {"ms_1": 1e3 * one, "ms_n": 1e3 * many, "speed_up": one / many}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mac", "lmm"])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--train-tokens", type=int, default=1024)
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="TOP",
        help="also print the TOP ops' self CPU time at 1 and N threads",
    )
    args = parser.parse_args(argv)
    n = _harness.threads_to_compare(parser, args.threads)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    print(f"| model | ms/step, 1 thread | ms/step, {n} threads | {n} threads' speed-up |")
    print("|---|---|---|---|")
    for name in args.models:
        row = measure(name, n, args.rounds, args.train_tokens)
        print(f"| {name} | {row['ms_1']:.0f} | {row['ms_n']:.0f} | {row['speed_up']:.2f}x |")
    for name in args.models if args.profile > 0 else []:
        print(f"\n{name}:")
        profile(eager_step(name, args.train_tokens), n, args.profile)


if __name__ == "__main__":
    main()
