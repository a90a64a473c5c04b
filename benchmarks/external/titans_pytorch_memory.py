"""Benchmark lucidrains' titans-pytorch ``NeuralMemory`` (reference for our chunked scan).

Run with the separate venv made by ``setup_titans_pytorch.sh`` (never imports titans_atlas):

    /work/venvs/titans-pytorch/bin/python benchmarks/external/titans_pytorch_memory.py \
        --tokens 2048 --mode fwdbwd --repeats 5

Prints one JSON line. Defaults: dim 384, 1 head (head dim 384), MLP memory depth 2 and
expansion 4 (384 -> 1536 -> 384, GELU, wrapped by the library's LayerNorm + residual),
chunk 64, batch 1, fp32, 2 threads, and ``batch_size`` = chunk size, so that each chunk's
gradient is taken at the weights left by the previous chunk (the Titans recurrence).
``--ttt-batch-size 0`` gives the library default (``batch_size=None``): every chunk's
gradient is taken at the sequence-start weights. Momentum and learned decay are on (library
defaults). Peak memory: see ``benchmarks/_harness.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _harness


def memory_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Constructor arguments of ``titans_pytorch.NeuralMemory`` for this run."""
    return dict(
        dim=args.dim,
        heads=1,
        dim_head=args.dim,
        chunk_size=args.chunk,
        batch_size=args.chunk if args.ttt_batch_size is None else args.ttt_batch_size or None,
        mem_model_norm_add_residual=not args.no_residual_norm,
        default_model_kwargs=dict(depth=2, expansion_factor=4.0),
    )


def build_step(args: argparse.Namespace) -> Callable[[], Any]:
    """Build the memory and input; return one forward (or forward+backward) step."""
    from titans_pytorch import NeuralMemory

    torch.manual_seed(args.seed)
    mem = NeuralMemory(**memory_kwargs(args))
    x = torch.randn(1, args.tokens, args.dim)

    if args.mode == "fwd":

        def step() -> Any:
            with torch.no_grad():
                return mem(x)[0]

        return step

    x.requires_grad_(True)
    params = [p for p in mem.parameters() if p.requires_grad]

    def step() -> None:
        x.grad = None
        for p in params:
            p.grad = None
        out, _ = mem(x)
        out.sum().backward()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--mode", choices=("fwd", "fwdbwd"), default="fwd")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--chunk", type=int, default=64)
    parser.add_argument(
        "--ttt-batch-size",
        type=int,
        default=None,
        help="NeuralMemory batch_size (default: the chunk size); 0 = library default (None)",
    )
    parser.add_argument(
        "--no-residual-norm",
        action="store_true",
        help="mem_model_norm_add_residual=False (plain MLP memory)",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip peak-memory child")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    _harness.set_threads(args.threads)
    timing = _harness.time_callable(build_step(args), args.warmup, args.repeats)
    mem = None if args.no_memory else _harness.peak_memory(build_step, args, threads=args.threads)
    settings = memory_kwargs(args)
    print(
        json.dumps(
            {
                "impl": "titans-pytorch",
                "version": version("titans-pytorch"),
                "torch": torch.__version__,
                "mode": args.mode,
                "tokens": args.tokens,
                "batch": 1,
                "dtype": "float32",
                "threads": args.threads,
                "settings": settings,
                "tokens_per_s": args.tokens / timing.median_s,
                "median_s": timing.median_s,
                "times_s": timing.times_s,
                "other_cpu_s": timing.other_cpu_s,
                "peak_mem_bytes": mem and mem["peak_bytes"],
                "mem": mem,
            }
        )
    )


if __name__ == "__main__":
    main()
