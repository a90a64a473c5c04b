"""MLX against torch on the same machine and shapes: the memory engine (forward, and forward +
backward) and greedy decoding, in tokens/s side by side.

    python benchmarks/mlx_vs_torch.py                  # engine 1024 tokens, decode 64 tokens
    python benchmarks/mlx_vs_torch.py --quick          # smoke run at small sizes
    python benchmarks/mlx_vs_torch.py --models lmm mac atlas --threads 2

Engine: batch 1, ``--heads`` heads of width ``--head-dim``, MLP memory (expansion 4), chunk
``--chunk``; "titans" = plain momentum, "atlas" = residual memory, Omega window 8, per-token
Muon. Decode: the model is built and saved by torch, loaded by MLX from that checkpoint; a
``--prompt``-token prefill, then ``--new-tokens`` greedy ``decode_one_token`` steps (median
step time). Both sides run float32. torch uses ``--threads`` intra-op threads; MLX's CPU
backend picks its own. On Linux the ``mlx[cpu]`` wheel links the reference BLAS: its matmuls
are several times slower than torch's, which dominates these ratios. Every row records the CPU
time other processes used meanwhile (``other_cpu_s``; see ``_harness.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import titans_atlas as ta
import titans_atlas.mlx as tam
from _harness import set_threads, time_callable
from titans_atlas import ops
from titans_atlas.generation import Sampler, SamplingConfig, decode_one_token, prefill
from titans_atlas.mlx import ops as mops

ENGINES = {
    "titans": {"residual": False, "window": 1, "muon": False},
    "atlas": {"residual": True, "window": 8, "muon": True},
}


def engine_inputs(batch: int, tokens: int, heads: int, dim: int, window: int) -> dict:
    gen = torch.Generator().manual_seed(0)
    shape = (batch, tokens, heads)
    unit = lambda: torch.nn.functional.normalize(torch.randn(*shape, dim, generator=gen), dim=-1)  # noqa: E731
    inputs = {"q": unit(), "k": unit(), "v": torch.randn(*shape, dim, generator=gen)}
    inputs |= {"lr": 0.01 * torch.rand(*shape, generator=gen)}
    inputs |= {"momentum": torch.rand(*shape, generator=gen), "decay": 0.01 * torch.rand(*shape)}
    inputs["omega_gate"] = torch.rand(*shape, window, generator=gen) if window > 1 else None
    return inputs


def torch_engine(memory, weights, inputs, options, backward: bool):
    leaves = {n: x.clone().requires_grad_(backward) for n, x in inputs.items() if x is not None}
    params = {n: w.clone().requires_grad_(backward) for n, w in weights.items()}

    def call():
        with torch.set_grad_enabled(backward):
            state = memory.initial_state(params, inputs["q"].shape[0])
            y, state = ops.memory_scan(memory, state=state, **leaves, **options)
            if backward:
                y.sum().backward()

    return call


def mlx_engine(memory, weights, inputs, options, backward: bool):
    arrays = {n: mx.array(x.numpy()) for n, x in inputs.items() if x is not None}
    params = {n: mx.array(w.numpy()) for n, w in weights.items()}
    batch = inputs["q"].shape[0]

    def forward(arrays, params):
        state = memory.initial_state(params, batch)
        y, state = mops.memory_scan(memory, state=state, **arrays, **options)
        return y.sum(), y

    grad = mx.grad(lambda a, p: forward(a, p)[0], argnums=(0, 1))

    def call():
        mx.eval(grad(arrays, params) if backward else forward(arrays, params)[1])

    return call


def bench_engine(args) -> list[dict]:
    rows = []
    for name in args.engines:
        setting = ENGINES[name]
        shape = {"dim_in": args.head_dim, "dim_out": args.head_dim, "expansion": 4}
        shape["residual"] = setting["residual"]
        memory, memory_mx = ops.MLPMemory(**shape), mops.MLPMemory(**shape)
        torch.manual_seed(0)
        weights = memory.init_weights(args.heads)
        inputs = engine_inputs(1, args.tokens, args.heads, args.head_dim, setting["window"])
        options = {"chunk_size": args.chunk, "omega_window": setting["window"]}
        options["muon"] = setting["muon"]
        for mode in ("fwd", "fwd+bwd"):
            backward = mode == "fwd+bwd"
            row = {"engine": name, "mode": mode, "tokens": args.tokens}
            for backend, build in (("torch", torch_engine), ("mlx", mlx_engine)):
                model = memory if backend == "torch" else memory_mx
                timing = time_callable(
                    build(model, weights, inputs, options, backward), repeats=args.repeats
                )
                row[f"{backend}_tokens_per_s"] = round(args.tokens / timing.median_s, 1)
                row[f"{backend}_other_cpu_s"] = round(timing.other_cpu_s, 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def torch_decode(model, prompt, steps: int):
    last, state = prefill(model, prompt)
    sampler = Sampler(SamplingConfig(greedy=True), prompt, model.config.vocab_size)
    stream = {"token": sampler(last), "state": state}

    def step():
        stream["token"], _, stream["state"] = decode_one_token(
            model, stream["token"], stream["state"], sampler
        )

    return step


def mlx_decode(model, prompt, steps: int):
    prompt = mx.array(prompt.numpy().astype(np.int32))
    last, state = tam.prefill(model, prompt)
    sampler = tam.Sampler(tam.SamplingConfig(greedy=True), prompt, model.config.vocab_size)
    stream = {"token": sampler(last), "state": state}

    def step():
        stream["token"], _, stream["state"] = tam.decode_one_token(
            model, stream["token"], stream["state"], sampler
        )

    return step


def bench_decode(args) -> list[dict]:
    rows = []
    size = {"vocab_size": 256, "dim": args.dim, "depth": args.depth, "num_heads": args.heads}
    size |= {"window": args.window, "chunk_size": args.chunk}
    prompt = torch.randint(0, 256, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    for name in args.models:
        torch.manual_seed(0)
        model = ta.create_model(name, **size).eval()
        with tempfile.TemporaryDirectory() as directory:
            model.save_pretrained(directory)
            model_mx = tam.load_model(directory)
        row = {"model": name, "prompt": args.prompt, "new_tokens": args.new_tokens}
        for backend, build, net in (("torch", torch_decode, model), ("mlx", mlx_decode, model_mx)):
            start = time.perf_counter()
            step = build(net, prompt, args.new_tokens)
            row[f"{backend}_prefill_s"] = round(time.perf_counter() - start, 3)
            timing = time_callable(step, warmup=2, repeats=args.new_tokens)
            row[f"{backend}_tokens_per_s"] = round(1.0 / timing.median_s, 1)
            row[f"{backend}_other_cpu_s"] = round(timing.other_cpu_s, 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def markdown(engine: list[dict], decode: list[dict]) -> str:
    lines = ["| engine | mode | tokens | torch tokens/s | MLX tokens/s | MLX / torch |"]
    lines.append("|---|---|---|---|---|---|")
    for r in engine:
        ratio = r["mlx_tokens_per_s"] / r["torch_tokens_per_s"]
        lines.append(
            f"| {r['engine']} | {r['mode']} | {r['tokens']} | {r['torch_tokens_per_s']:,} | "
            f"{r['mlx_tokens_per_s']:,} | {ratio:.2f}x |"
        )
    lines += ["", "| model | prompt | torch decode tokens/s | MLX decode tokens/s | MLX / torch |"]
    lines.append("|---|---|---|---|---|")
    for r in decode:
        ratio = r["mlx_tokens_per_s"] / r["torch_tokens_per_s"]
        lines.append(
            f"| {r['model']} | {r['prompt']} | {r['torch_tokens_per_s']:,} | "
            f"{r['mlx_tokens_per_s']:,} | {ratio:.2f}x |"
        )
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--models", nargs="+", default=["lmm", "mac", "atlas"])
    parser.add_argument("--tokens", type=int, default=1024, help="engine tokens per call")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--chunk", type=int, default=64)
    parser.add_argument("--dim", type=int, default=128, help="model width for decoding")
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.tokens, args.chunk, args.dim, args.window = 128, 16, 32, 16
        args.prompt, args.new_tokens, args.repeats = 32, 8, 1
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    set_threads(args.threads)
    engine, decode = bench_engine(args), bench_decode(args)
    meta = {"torch": torch.__version__, "mlx": mx.__version__, "machine": platform.machine()}
    meta |= {"cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0], "args": vars(args)}
    print(json.dumps(meta))
    print(markdown(engine, decode))


if __name__ == "__main__":
    main()
