"""Decode cost per token against context length (spec property 3: it does not grow for
memory-only and sliding-window models; the full-attention Transformer is the contrast).

For each model and context: prefill a random prompt of that length in one call (batch 1),
then time ``decode_one_token`` steps one by one (as ``generate`` runs them: value checks
off after the prefill) and report the median ms/token, the ratio
largest/smallest context, and the size of the streaming state after decoding (its tensors)
and the storage the state right after prefill keeps alive (views can pin prompt-length
buffers).

    python benchmarks/generation.py                       # dim 256, depth 4, 1k and 16k
    python benchmarks/generation.py --contexts 1024 8192 --models lmm swa
    python benchmarks/generation.py --quick               # smoke run: small contexts
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
import titans_atlas as ta
from _harness import as_generate_decodes, machine_busy_cpu_s, set_threads, time_callable
from titans_atlas.generation import Sampler, SamplingConfig, decode_one_token, prefill
from titans_atlas.ops.state import map_tensors

RESULTS = Path(__file__).parent / "results"


def state_bytes(obj: Any) -> tuple[int, int]:
    """(logical, held) bytes of a (nested) streaming state: the tensors' own sizes, and the
    storages they keep alive (a small view can pin a whole prompt-length buffer). Each
    storage is counted once (MAC's segment weights share the memory's tensors)."""
    tensors = _tensors(obj)
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    views = {(t.data_ptr(), t.shape, t.stride()): t.numel() * t.element_size() for t in tensors}
    return sum(views.values()), sum(storages.values())


def _tensors(obj: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    map_tensors(obj, found.append)
    return found


def wait_until_quiet(max_wait_s: float, threshold: float = 0.15) -> float:
    """Wait (up to ``max_wait_s``) until other processes use < ``threshold`` of one core over
    a 2 s window; return the last measured fraction (warn if still busy)."""
    deadline = time.monotonic() + max_wait_s
    while True:
        busy0, own0 = machine_busy_cpu_s(), time.process_time()
        time.sleep(2.0)
        other = (machine_busy_cpu_s() - busy0 - (time.process_time() - own0)) / 2.0
        if other < threshold or time.monotonic() > deadline:
            if other >= threshold:
                print(f"WARNING: other processes use {other:.2f} cores: numbers are noisy")
            return other
        print(f"machine busy ({other:.2f} cores used by others); waiting...", flush=True)
        time.sleep(10.0)


def time_decode(model, token, state, sampler, new_tokens: int, warmup: int):
    """Time ``new_tokens`` single decode steps from ``state`` (which is left untouched)."""
    stream = {"token": token, "state": state}

    def step() -> None:
        with as_generate_decodes():
            stream["token"], _, stream["state"] = decode_one_token(
                model, stream["token"], stream["state"], sampler
            )

    return time_callable(step, warmup=warmup, repeats=new_tokens), stream["state"]


def measure(model: ta.LanguageModel, context: int, args: argparse.Namespace) -> dict:
    """Prefill ``context`` random tokens, then time single decode steps; retry the decode
    timing (from the same prefilled state) while other processes took > 10% of its time."""
    gen = torch.Generator().manual_seed(context)
    prompt = torch.randint(0, model.config.vocab_size, (1, context), generator=gen)
    busy0, own0, start = machine_busy_cpu_s(), time.process_time(), time.perf_counter()
    last, state = prefill(model, prompt)
    prefill_s = time.perf_counter() - start
    prefill_other = machine_busy_cpu_s() - busy0 - (time.process_time() - own0)
    best = None
    for _ in range(args.retries + 1):
        sampler = Sampler(SamplingConfig(greedy=True), prompt, model.config.vocab_size)
        timing, end_state = time_decode(
            model, sampler(last), state, sampler, args.new_tokens, args.warmup
        )
        if best is None or timing.other_cpu_s < best.other_cpu_s:
            best = timing
        if timing.other_cpu_s <= 0.1 * sum(timing.times_s):
            break
        wait_until_quiet(args.max_wait_s)
    logical, held = state_bytes(end_state)
    _, held_after_prefill = state_bytes(state)
    return {
        "context": context,
        "prefill_s": round(prefill_s, 3),
        "prefill_other_cpu_s": round(max(prefill_other, 0.0), 3),
        "decode_ms_median": round(1e3 * best.median_s, 3),
        "decode_ms_all": [round(1e3 * t, 3) for t in best.times_s],
        "decode_cpu_ms_median": round(1e3 * best.cpu_median_s, 3),
        "other_cpu_s": round(best.other_cpu_s, 3),
        "state_mib": round(logical / 2**20, 2),
        "state_held_mib": round(held / 2**20, 2),
        "prefill_state_held_mib": round(held_after_prefill / 2**20, 2),
    }


def affordable(context: int, rows: list[dict], max_prefill_s: float) -> int:
    """``context``, or half of it if a linear extrapolation of the previous prefill (the
    memory scans are linear in T) exceeds ``max_prefill_s``."""
    if not rows:
        return context
    per_token = rows[-1]["prefill_s"] / rows[-1]["context"]
    if context >= 4 * rows[-1]["context"] and per_token * context > max_prefill_s:
        return context // 2
    return context


def model_size(args: argparse.Namespace) -> dict:
    """``create_model``'s size arguments from the command line."""
    size = {"vocab_size": args.vocab, "dim": args.dim, "depth": args.depth}
    return size | {"num_heads": args.heads, "window": args.window, "chunk_size": args.chunk_size}


def run(args: argparse.Namespace) -> dict:
    size = model_size(args)
    results = {}
    for name in args.models:
        torch.manual_seed(0)
        model = ta.create_model(name, **size).eval()
        rows: list[dict] = []
        for wanted in args.contexts:
            context = affordable(wanted, rows, args.max_prefill_s)
            if context != wanted:
                print(
                    f"{name}: prefill of {wanted} would take > {args.max_prefill_s:.0f} s; "
                    f"using {context}"
                )
            wait_until_quiet(args.max_wait_s)
            row = {"requested_context": wanted, **measure(model, context, args)}
            rows.append(row)
            print(
                f"{name:12s} ctx {context:6d}: prefill {row['prefill_s']:8.2f} s, decode "
                f"{row['decode_ms_median']:7.2f} ms/token, state {row['state_mib']:.2f} MiB "
                f"(holds {row['state_held_mib']:.2f}; after prefill "
                f"{row['prefill_state_held_mib']:.2f}), "
                f"other cpu {row['prefill_other_cpu_s']:.2f} / {row['other_cpu_s']:.2f} s",
                flush=True,
            )
        results[name] = rows
    return {
        "config": size,
        "threads": args.threads,
        "new_tokens": args.new_tokens,
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "results": results,
    }


def markdown(report: dict) -> str:
    """One row per model: ms/token at the shortest and longest context, their ratio,
    prefill time and streaming-state size at both."""
    head = ["model", "ctx short", "ms/token", "ctx long", "ms/token", "ratio long/short"]
    head += ["prefill s (short / long)", "state MiB (short / long)"]
    head += ["held after prefill MiB (short / long)", "other-CPU s (prefills / decodes)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, rows in report["results"].items():
        a, b = rows[0], rows[-1]
        ratio = b["decode_ms_median"] / a["decode_ms_median"]
        cells = [name, a["context"], f"{a['decode_ms_median']:.2f}", b["context"]]
        cells += [f"{b['decode_ms_median']:.2f}", f"{ratio:.2f}"]
        cells += [f"{a['prefill_s']:.1f} / {b['prefill_s']:.1f}"]
        cells += [f"{a['state_mib']:.2f} / {b['state_mib']:.2f}"]
        cells += [f"{a['prefill_state_held_mib']:.2f} / {b['prefill_state_held_mib']:.2f}"]
        other = [max(r[k] for r in rows) for k in ("prefill_other_cpu_s", "other_cpu_s")]
        cells += [f"{other[0]:.2f} / {other[1]:.2f}"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["lmm", "atlas", "swa", "mac", "transformer"])
    p.add_argument("--contexts", nargs="+", type=int, default=[1024, 16384])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--chunk-size", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--retries", type=int, default=3, help="re-time decode if the box was busy")
    p.add_argument("--max-wait-s", type=float, default=600.0, help="wait for a quiet machine")
    p.add_argument("--max-prefill-s", type=float, default=180.0, help="halve longer contexts")
    p.add_argument("--quick", action="store_true", help="smoke run: contexts 128 and 512")
    p.add_argument("--out", type=Path, default=RESULTS / "generation.json")
    args = p.parse_args(argv)
    if args.quick:
        args.contexts, args.new_tokens, args.max_wait_s = [128, 512], 8, 0.0
    return args


def main() -> None:
    args = parse_args()
    set_threads(args.threads)
    report = run(args)
    table = markdown(report)
    print("\n" + table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report | {"table": table}, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
