"""When does compiling the decode step pay? For each model and depth: the eager and compiled
time per token, the compile time of every graph a stream needs (one period of the memory's
chunk phase and the attention's segment phase), and that compile time in eager tokens -- the
measurement behind ``DECODE_PAYS_AFTER_STEPS`` (``titans_atlas.compiling``; docs/benchmarks.md,
"What you get by default"). Eager and compiled steps run in one process, so the machine's load
stretches both alike; inductor's on-disk cache is off, so every compile is cold.

    python benchmarks/decode_break_even.py --models mac:1 mac:2 mac:4 lmm:2
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

import titans_atlas as ta
from titans_atlas.generation import compiled_decode_step
from titans_atlas.ops import validating


def timed_steps(step, token: torch.Tensor, state, count: int) -> tuple[list[float], object]:
    """Per-call seconds of ``count`` decode steps, and the state after them."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        _, state = step(token, state)
        times.append(time.perf_counter() - start)
    return times, state


@torch.no_grad()
def measure(name: str, depth: int, dim: int, window: int, chunk: int, tokens: int) -> dict:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = ta.create_model(
        name, vocab_size=256, dim=dim, depth=depth, num_heads=4, window=window, chunk_size=chunk
    ).eval()
    token = torch.ones(1, 1, dtype=torch.long)
    with validating(False):  # as generate decodes after its checked prefill
        _, state = model(torch.randint(0, 256, (1, 256)), last_only=True)
        eager, _ = timed_steps(model, token, state, tokens)
        period = math.lcm(chunk, window) + 2  # every chunk and segment phase: every graph
        warm, state = timed_steps(compiled_decode_step(model), token, state, period)
        compiled, _ = timed_steps(compiled_decode_step(model), token, state, tokens)
    eager_s, compiled_s = statistics.median(eager), statistics.median(compiled)
    compile_s = sum(warm) - period * compiled_s
    return {
        "model": f"{name}:{depth}", "eager_ms": 1e3 * eager_s, "compiled_ms": 1e3 * compiled_s,
        "compile_s": compile_s, "compile_in_tokens": compile_s / eager_s,
        "break_even_tokens": compile_s / (eager_s - compiled_s),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["mac:1", "mac:2", "mac:4", "lmm:2"],
                        help="NAME:DEPTH")  # fmt: skip
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64, help="timed tokens per mode")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch._inductor.config.fx_graph_cache = False  # a cold compile, as a user's first one
    print("| model:depth | eager ms/token | compiled ms/token | speed-up | compile s | "
          "compile = eager tokens | break-even tokens |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for spec in args.models:
        name, _, depth = spec.partition(":")
        r = measure(name, int(depth or 2), args.dim, args.window, args.chunk_size, args.tokens)
        speedup = r["eager_ms"] / r["compiled_ms"]
        print(f"| {r['model']} | {r['eager_ms']:.2f} | {r['compiled_ms']:.2f} | {speedup:.2f}x | "
              f"{r['compile_s']:.0f} | {r['compile_in_tokens']:.0f} | "
              f"{r['break_even_tokens']:.0f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
