"""Where a compiled decode step's time goes: the benchmark MAC's ``compiled_decode_step``,
warmed up over one period of its chunk and segment phases, then profiled over single-token
steps. Prints each top entry's share of the profiled CPU time, "TorchDynamo Cache Lookup"
(the guards that choose a compiled graph) among them (docs/benchmarks.md).

    python benchmarks/decode_profile.py                 # dim 256, depth 2, window 128, 1 thread
    python benchmarks/decode_profile.py --steps 64 --threads 2
"""

from __future__ import annotations

import argparse
import math

import torch
from torch.profiler import profile

import titans_atlas as ta
from titans_atlas.generation import compiled_decode_step
from titans_atlas.ops import validating


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--chunk-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--top", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = ta.create_model(
        "mac", vocab_size=256, dim=args.dim, depth=args.depth, num_heads=4,
        window=args.window, chunk_size=args.chunk_size,
    ).eval()  # fmt: skip
    step = compiled_decode_step(model)
    token = torch.ones(1, 1, dtype=torch.long)
    with torch.no_grad(), validating(False):  # as generate decodes after its checked prefill
        _, state = model(torch.randint(0, 256, (1, 256)), last_only=True)
        for _ in range(math.lcm(args.chunk_size, args.window) + 2):  # every graph compiled
            _, state = step(token, state)
        with profile() as prof:
            for _ in range(args.steps):
                _, state = step(token, state)
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    print(f"profiled {args.steps} steps: {total / 1e3 / args.steps:.2f} ms CPU per token")
    for event in events[: args.top]:
        share = event.self_cpu_time_total / total
        per_token = event.self_cpu_time_total / 1e3 / args.steps
        print(f"{share:6.1%}  {per_token:6.3f} ms/token  {event.key[:60]}")


if __name__ == "__main__":
    main()
