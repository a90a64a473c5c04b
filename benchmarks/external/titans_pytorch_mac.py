"""Benchmark lucidrains' titans-pytorch ``MemoryAsContextTransformer`` (the MAC model beside
ours in ``benchmarks/models.py``): a training step and greedy decoding with its cache.

Run with the separate venv made by ``setup_titans_pytorch.sh`` (never imports titans_atlas):

    /work/venvs/titans-pytorch/bin/python benchmarks/external/titans_pytorch_mac.py --quick

Prints one JSON line. Shape: bytes (256 tokens), ``dim``, ``depth``, segment ``segment``,
4 heads of 64 (as our models at dim 256), 4 persistent and 16 long-term memory tokens (its
README's example), its other defaults (memory chunk = segment + long-term tokens, 4 residual
streams). train: ``model(ids, return_loss=True).backward()`` on ``batch x train_tokens``.
decode: its own ``sample`` loop with ``use_cache=True`` and temperature 0 (argmax), written out
so the prompt's first forward is not timed. ``--serve``: a worker that times one training step
per line on stdin (``models.py --interleave`` alternates it with our steps).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _harness


def build(args: argparse.Namespace):
    from titans_pytorch import MemoryAsContextTransformer

    torch.manual_seed(0)
    model = MemoryAsContextTransformer(
        num_tokens=256,
        dim=args.dim,
        depth=args.depth,
        segment_len=args.segment,
        heads=args.heads,
        dim_head=args.dim // args.heads,
        num_persist_mem_tokens=args.persist_tokens,
        num_longterm_mem_tokens=args.longterm_tokens,
    )
    return model.to(args.device)


def autocast(args: argparse.Namespace) -> torch.autocast:
    return _harness.bf16_autocast(args.device, args.dtype)


def train_step(args: argparse.Namespace):
    model = build(args).train()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 256, (args.batch, args.train_tokens + 1), generator=gen).to(args.device)

    def step() -> None:
        with autocast(args):
            loss = model(ids, return_loss=True)
        loss.backward()
        model.zero_grad(set_to_none=True)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    return step


@torch.no_grad()
def decode_tokens_per_s(args: argparse.Namespace) -> float:
    model = build(args).eval()
    gen = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, 256, (1, args.prompt_tokens), generator=gen).to(args.device)
    total = args.prompt_tokens + args.new_tokens
    length = model.seq_len_with_longterm_mem(total)
    dims = model.axial_pos_emb.maybe_derive_outer_dim(length, (model.neural_memory_segment_len,))
    pos_emb = model.axial_pos_emb(dims, return_factorized=True)

    def run() -> float:
        out, cache, start = prompt.clone(), None, None
        while out.shape[-1] < total:
            if out.shape[-1] == args.prompt_tokens + 1:
                start = time.perf_counter()  # after the prompt's forward and first token
            with autocast(args):
                logits, cache = model.forward(
                    out, disable_flex_attn=True, cache=cache, return_cache=True,
                    factorized_pos_emb=pos_emb,
                )  # fmt: skip
            if logits is None:  # as in its sample(): a step that only fills memory tokens
                continue
            out = torch.cat((out, logits[:, -1].argmax(-1, keepdim=True)), dim=-1)
        return (args.new_tokens - 1) / (time.perf_counter() - start)

    run()  # warm-up
    rates = sorted(run() for _ in range(3))
    return rates[1]


def serve(step) -> None:
    """Worker for a benchmark that interleaves this model's steps with its own: after a
    warm-up step print "ready", then for each line on stdin run one training step and print
    its seconds (timed here, so the pipe's latency is not counted)."""
    step()
    print("ready", flush=True)
    for _ in sys.stdin:
        start = time.perf_counter()
        step()
        print(time.perf_counter() - start, flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--segment", type=int, default=128)
    p.add_argument("--persist-tokens", type=int, default=4)
    p.add_argument("--longterm-tokens", type=int, default=16)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--train-tokens", type=int, default=1024)
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--memory", action="store_true", help="peak RSS of a training step")
    p.add_argument("--quick", action="store_true", help="smoke run at tiny sizes")
    p.add_argument("--serve", action="store_true", help="time one training step per stdin line")
    args = p.parse_args()
    if args.quick:
        args.dim, args.depth, args.heads, args.segment = 32, 1, 2, 16
        args.train_tokens, args.prompt_tokens, args.new_tokens, args.repeats = 64, 16, 8, 2
    _harness.set_threads(args.threads)
    step = train_step(args)
    if args.serve:
        serve(step)
        return
    timing = _harness.time_callable(step, warmup=1, repeats=args.repeats)
    train = {"tokens_per_s": args.batch * args.train_tokens / timing.median_s}
    train |= {"step_s": timing.median_s, "other_cpu_s": timing.other_cpu_s}
    if args.memory and args.device == "cpu":
        peak = _harness.peak_memory(train_step, args, threads=args.threads)
        train["peak_mb"] = peak["peak_bytes"] / 2**20
    decode = {"tokens_per_s": decode_tokens_per_s(args)}
    decode["ms_per_token"] = 1e3 / decode["tokens_per_s"]
    result = {"impl": f"titans-pytorch {version('titans-pytorch')}", "train": train}
    print(json.dumps(result | {"decode": decode, "args": vars(args)}))


if __name__ == "__main__":
    main()
