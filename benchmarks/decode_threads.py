"""Eager decoding at one thread against the process's thread count, alternating in one
process (issue 36, "Use the cores": does a batch-1 decode step, thousands of tiny ops, lose
time to the OpenMP handoff at two threads?).

Separate processes started at 1 and 2 threads gave the one-thread run 1.2x (docs/benchmarks.md),
but 2-thread decode times move 25% from run to run on this shared machine; only an alternation
in one process compares the two under the same load. Each round decodes ``--tokens`` greedy
steps (value checks off after the prefill, as ``generate`` runs them) at one thread, then at
``--threads``; the medians over ``--rounds`` are printed per batch size.

    python benchmarks/decode_threads.py --models mac lmm --batches 1 4 8 16
    python benchmarks/decode_threads.py --models mac --batches 1 8 --compiled

``--compiled`` times ``compiled_decode_step`` instead, in separate processes that alternate
(1 thread, N threads, 1, N, ... ``--processes`` pairs): inductor fixes a kernel's OpenMP team
at compile time, so graphs compiled at one count and run at the other measure neither. Each
process sets its count before anything compiles, warms up over every chunk and segment
phase, then times ``--rounds`` rounds; the medians over all rounds are printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

import _harness
from models import build, parse_args
from titans_atlas.generation import compiled_decode_step


@torch.no_grad()
def ms_per_token(step, first, state, tokens: int, threads: int) -> float:
    torch.set_num_threads(threads)
    token = first
    with _harness.as_generate_decodes():
        start = time.perf_counter()
        for _ in range(tokens):
            logits, state = step(token, state)
            token = logits[:, -1].argmax(-1, keepdim=True)
        return 1e3 * (time.perf_counter() - start) / tokens


def measure(name: str, batch: int, threads: int, tokens: int, rounds: int) -> dict:
    torch.manual_seed(0)
    model = build(name, parse_args(["--models", name, "--batch", str(batch)])).eval()
    prompt = torch.randint(0, 256, (batch, 256))
    torch.set_num_threads(threads)
    with torch.no_grad():
        logits, prefilled = model(prompt, last_only=True)
    first = logits[:, -1].argmax(-1, keepdim=True)
    # warm-up past a chunk and a segment boundary at both counts
    for count in (1, threads):
        ms_per_token(model, first, prefilled, 140, count)
    times: dict[int, list[float]] = {1: [], threads: []}
    for _ in range(rounds):
        for count in (1, threads):
            times[count].append(ms_per_token(model, first, prefilled, tokens, count))
    one, many = statistics.median(times[1]), statistics.median(times[threads])
    return {"model": name, "batch": batch, "ms_1": one, f"ms_{threads}": many, "ratio": many / one}


def compiled_rounds(name: str, batch: int, threads: int, tokens: int, rounds: int) -> list:
    """ms/token of ``rounds`` rounds of compiled decoding, all at ``threads`` threads from the
    start (run in a fresh process: see the module docstring)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build(name, parse_args(["--models", name, "--batch", str(batch)])).eval()
    with torch.no_grad():
        logits, prefilled = model(torch.randint(0, 256, (batch, 256)), last_only=True)
    first = logits[:, -1].argmax(-1, keepdim=True)
    step = compiled_decode_step(model)
    ms_per_token(step, first, prefilled, 140, threads)  # compiles every phase
    return [ms_per_token(step, first, prefilled, tokens, threads) for _ in range(rounds)]


def measure_compiled(
    name: str, batch: int, threads: int, tokens: int, rounds: int, processes: int
) -> dict:
    times: dict[int, list[float]] = {1: [], threads: []}
    for _ in range(processes):
        for count in (1, threads):
            child = [sys.executable, __file__, "--child", name, str(batch), str(count)]
            child += [str(tokens), str(rounds)]
            out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
            times[count] += json.loads(out.strip().splitlines()[-1])
    one, many = statistics.median(times[1]), statistics.median(times[threads])
    return {"model": name, "batch": batch, "ms_1": one, f"ms_{threads}": many, "ratio": many / one}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mac"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4, 8, 16])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compiled", action="store_true", help="time compiled_decode_step")
    parser.add_argument("--processes", type=int, default=2, help="--compiled: process pairs")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # one compiled process: name batch threads tokens rounds
        name, *numbers = args.child
        batch, threads, tokens, rounds = map(int, numbers)
        print(json.dumps(compiled_rounds(name, batch, threads, tokens, rounds)))
        return
    n = _harness.threads_to_compare(parser, args.threads)
    print(f"| model | batch | ms/token, 1 thread | ms/token, {n} threads | 1 thread's speed-up |")
    print("|---|---|---|---|---|")
    for name in args.models:
        for batch in args.batches:
            if args.compiled:
                row = measure_compiled(name, batch, n, args.tokens, args.rounds, args.processes)
            else:
                row = measure(name, batch, n, args.tokens, args.rounds)
            print(
                f"| {name} | {batch} | {row['ms_1']:.2f} | {row[f'ms_{n}']:.2f} | "
                f"{row['ratio']:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
