"""Benchmark ``memory_scan``: tokens/s, peak memory and fraction of the matmul peak.

    python benchmarks/memory_scan.py                 # everything, 2 threads, fp32
    python benchmarks/memory_scan.py --only titans   # or: atlas, muon, auto
    python benchmarks/memory_scan.py --only muon --tokens 64   # small sizes, a quick look
    python benchmarks/memory_scan.py --only atlas --heads 16 --tokens 2048 --memory-only

Configurations (issues 2 and 3):
* titans: dim 384, one head, MLP memory 384 -> 1536 -> 384 (GELU), chunk 64, 2048 tokens,
  batch 1, against the per-token reference and against lucidrains' titans-pytorch 0.5.5 run
  from its own virtual environment (``benchmarks/external/setup_titans_pytorch.sh``).
* atlas: residual MLP memory 64 -> 256 -> 64 per head, 4 heads, 512 tokens, chunk 8, Omega
  window 8, per-token Muon; forward+backward without and with per-chunk checkpointing.
* muon: the cost of per-token Muon against the NS5 FLOP count at the atlas geometry: NS5 alone
  on one chunk's momenta, and the whole scan's time per token set against the NS5 FLOPs it
  must do per token (analytic count; fraction of the measured matmul peak).
* auto: one decoding step (T = 1) and short calls through each form, to place ``impl="auto"``.

FLOPs are counted with torch's FlopCounterMode over the actual forward (and backward) matmuls,
so "fraction of peak" = counted FLOP/s / the fp32 matmul peak measured in the same run.
Peak memory: RSS growth during one call in a fresh subprocess (see ``_harness.py``).
Results print as markdown and are written to ``benchmarks/results/memory_scan.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness
from titans_atlas.ops import MLPMemory, memory_scan, newton_schulz5

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL_PYTHON = ROOT.parent / "venvs" / "titans-pytorch" / "bin" / "python"
CONFIGS = {
    "titans": dict(
        dim=384,
        heads=1,
        expansion=4,
        residual=False,
        chunk=64,
        tokens=2048,
        window=1,
        muon=False,
        checkpoint=False,
    ),
    "atlas": dict(
        dim=64,
        heads=4,
        expansion=4,
        residual=True,
        chunk=8,
        tokens=512,
        window=8,
        muon=True,
        checkpoint=False,
    ),
}
# atlas-torch at the atlas geometry, as measured on this kind of machine (issue 3); it
# materialises every token's weights for the whole sequence.
ATLAS_TORCH_ANCHOR = {"fwd": 20.0, "fwdbwd": 6.0, "fwdbwd_peak_gb": 9.3}


def build_step(config: dict, mode: str, impl: str = "chunk", tokens: int | None = None):
    """Inputs as the memory layer feeds them; returns a zero-argument step for ``mode``."""
    torch.manual_seed(0)
    c, length = config, tokens or config["tokens"]
    memory = MLPMemory(c["dim"], c["dim"], expansion=c["expansion"], residual=c["residual"])
    weights = {
        n: w.requires_grad_(mode == "fwdbwd") for n, w in memory.init_weights(c["heads"]).items()
    }
    shape = (1, length, c["heads"])
    q, k = (F.normalize(torch.randn(*shape, c["dim"]), dim=-1) for _ in range(2))
    v = torch.randn(*shape, c["dim"])
    gates = [0.1 * torch.rand(shape), 0.9 * torch.rand(shape), 0.01 * torch.rand(shape)]
    omega = torch.rand(*shape, c["window"]) if c["window"] > 1 else None
    leaves = [q, k, v, *gates] + ([omega] if omega is not None else [])
    kwargs = dict(
        chunk_size=c["chunk"],
        omega_window=c["window"],
        omega_gate=omega,
        muon=c["muon"],
        impl=impl,
        checkpoint=c["checkpoint"],
    )

    def run():
        state = memory.initial_state(weights, 1)
        return memory_scan(memory, q, k, v, *gates, state, **kwargs)

    if mode == "fwd":
        return lambda: _no_grad(run)
    for leaf in leaves:
        leaf.requires_grad_(True)

    def step():
        y, state = run()
        (y.sum() + sum(w.sum() for w in state.weights.values())).backward()
        for tensor in [*leaves, *weights.values()]:
            tensor.grad = None

    return step


def _no_grad(fn):
    with torch.no_grad():
        return fn()


def _batched_matmul_flops(self_shape, a_shape, b_shape, out_shape=None, **kwargs) -> int:
    return 2 * a_shape[0] * a_shape[1] * a_shape[2] * b_shape[2]


def counted_flops(step) -> int:
    """Matmul FLOPs of one call (torch's counter does not know the in-place ``baddbmm_``)."""
    extra = {torch.ops.aten.baddbmm_: _batched_matmul_flops}
    with FlopCounterMode(display=False, custom_mapping=extra) as counter:
        step()
    return counter.get_total_flops()


def measure(config: dict, mode: str, impl: str, repeats: int, threads: int, tokens=None):
    step = build_step(config, mode, impl, tokens)
    timing = _harness.time_callable(step, warmup=1, repeats=repeats)
    flops = counted_flops(step)
    memory = _harness.peak_memory(build_step, config, mode, impl, tokens, threads=threads)
    length = tokens or config["tokens"]
    return {
        "impl": f"titans-atlas {impl}",
        "mode": mode,
        "tokens": length,
        "tokens_per_s": length / timing.median_s,
        "median_s": timing.median_s,
        "times_s": timing.times_s,
        "other_cpu_s": timing.other_cpu_s,
        "gflop_per_s": flops / timing.median_s / 1e9,
        "peak_mem_bytes": memory["peak_bytes"],
    }


def measure_titans_pytorch(
    mode: str, repeats: int, threads: int, default: bool, memory: bool = True
) -> dict | None:
    """``default``: the library's batch_size=None (every gradient at the sequence-start
    weights); otherwise batch_size = chunk (weights advance per chunk, as Titans)."""
    if not EXTERNAL_PYTHON.exists():
        print(
            f"  (skipping titans-pytorch: {EXTERNAL_PYTHON} missing; run "
            "benchmarks/external/setup_titans_pytorch.sh)"
        )
        return None
    script = ROOT / "benchmarks" / "external" / "titans_pytorch_memory.py"
    args = [
        "--tokens",
        "2048",
        "--mode",
        mode,
        "--repeats",
        str(repeats),
        "--threads",
        str(threads),
    ]
    args += ["--ttt-batch-size", "0"] if default else []
    args += [] if memory else ["--no-memory"]
    out = subprocess.run(
        [str(EXTERNAL_PYTHON), str(script), *args], check=True, capture_output=True, text=True
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    variant = "default (batch_size=None)" if default else "batch_size=64"
    result["impl"] = f"titans-pytorch {result['version']} {variant}"
    return result


def table(rows: list[dict], peak: float) -> str:
    lines = [
        "| impl | mode | tokens | tokens/s | GFLOP/s | % of peak | peak memory (MB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        gf = r.get("gflop_per_s")
        rate = "| |" if gf is None else f"| {gf:.1f} | {100 * gf / peak:.0f}% |"
        lines.append(
            f"| {r['impl']} | {r['mode']} | {r['tokens']} | {r['tokens_per_s']:,.1f} {rate} "
            f"{r['peak_mem_bytes'] / 2**20:,.0f} |"
        )
    return "\n".join(lines)


def interleaved_ratios(config: dict, mode: str, default: bool, args) -> list[float]:
    """Our tokens/s over titans-pytorch's, timed in alternating rounds so that drifts in the
    machine's speed hit both sides alike."""
    step, ratios = build_step(config, mode), []
    for _ in range(args.rounds):
        ours = config["tokens"] / _harness.time_callable(step, warmup=1, repeats=3).median_s
        theirs = measure_titans_pytorch(mode, 3, args.threads, default, memory=False)
        ratios.append(ours / theirs["tokens_per_s"])
    return ratios


def run_titans(args, peak: float) -> list[dict]:
    config, rows = CONFIGS["titans"], []
    for mode in ("fwd", "fwdbwd"):
        ours = measure(config, mode, "chunk", args.repeats, args.threads)
        rows += [ours, measure(config, mode, "reference", 1, args.threads, tokens=256)]
        for default in (True, False):
            theirs = measure_titans_pytorch(mode, args.repeats, args.threads, default)
            if theirs is None:
                continue
            ratios = interleaved_ratios(config, mode, default, args)
            theirs["interleaved_speedups"] = ratios
            rows.append(theirs)
            print(
                f"  {mode}: {statistics.median(ratios):.1f}x the tokens/s (rounds: "
                f"{', '.join(f'{r:.1f}' for r in ratios)}) and "
                f"{ours['peak_mem_bytes'] / theirs['peak_mem_bytes']:.2f}x the peak memory "
                f"of {theirs['impl']}"
            )
    print(table(rows, peak))
    return rows


def run_atlas_memory(args) -> list[dict]:
    """Peak memory only (no timing) of forward+backward, without and with checkpointing: for
    geometries too slow to time here (issue 16's 16 heads x 2,048 tokens)."""
    rows = []
    for checkpoint in (False, True):
        config = {**CONFIGS["atlas"], "heads": args.heads, "checkpoint": checkpoint}
        tokens = args.tokens or config["tokens"]
        memory = _harness.peak_memory(
            build_step, config, "fwdbwd", "chunk", tokens, threads=args.threads, warmup=0
        )
        row = dict(heads=args.heads, tokens=tokens, checkpoint=checkpoint, **memory)
        rows.append(row)
        print(
            f"  {args.heads} heads x {tokens} tokens, batch 1, checkpoint={checkpoint}: "
            f"{memory['peak_bytes'] / 2**20:,.0f} MB ({memory['method']})",
            flush=True,
        )
    return rows


def run_atlas(args, peak: float) -> list[dict]:
    if args.memory_only:
        return run_atlas_memory(args)
    config = {**CONFIGS["atlas"], "heads": args.heads}
    rows = [
        measure(config, mode, "chunk", args.repeats, args.threads, args.tokens)
        for mode in ("fwd", "fwdbwd")
    ]
    checkpointed = {**config, "checkpoint": True}
    row = measure(checkpointed, "fwdbwd", "chunk", args.repeats, args.threads, args.tokens)
    rows.append({**row, "impl": row["impl"] + " checkpoint=True"})
    print(table(rows, peak))
    for row in rows:
        ratio = row["tokens_per_s"] / ATLAS_TORCH_ANCHOR[row["mode"]]
        print(
            f"  {row['mode']}: {ratio:.0f}x the atlas-torch anchor "
            f"({ATLAS_TORCH_ANCHOR[row['mode']]} tokens/s)"
        )
    return rows


def ns5_flops(m: int, n: int, mode: str) -> int:
    """Matmul FLOPs of NS5 on one m x n matrix (m <= n). Each of the 5 steps: G = X X^T
    (2 m^2 n), b G + c G^2 (2 m^3), P X (2 m^2 n). The backward recomputes the forward, then
    per step dP = dY X^T, P dY, dG X (3 x 2 m^2 n) and Q G (2 m^3)."""
    step = 4 * m * m * n + 2 * m**3
    backward = 6 * m * m * n + 2 * m**3
    return 5 * step if mode == "fwd" else 5 * (2 * step + backward)


def build_ns5(shape: tuple[int, int, int], mode: str):
    x = torch.randn(shape, requires_grad=mode == "fwdbwd")
    if mode == "fwd":
        return lambda: _no_grad(lambda: newton_schulz5(x))
    probe = torch.randn(shape)

    def step():
        (newton_schulz5(x) * probe).sum().backward()
        x.grad = None

    return step


def run_muon(args, peak: float) -> list[dict]:
    """Per-token Muon at the atlas geometry against its NS5 FLOPs (fraction of matmul peak)."""
    c = CONFIGS["atlas"]
    tokens = args.tokens or c["tokens"]
    memory = MLPMemory(c["dim"], c["dim"], expansion=c["expansion"], residual=c["residual"])
    wide = Counter(tuple(sorted(s)) for s in memory.weight_shapes().values())
    rows = []
    for mode in ("fwd", "fwdbwd"):
        for (m, n), count in wide.items():  # one chunk's momenta go through NS5 in one call
            shape = (count * c["heads"] * c["chunk"], m, n)
            seconds = _harness.time_callable(build_ns5(shape, mode), repeats=args.repeats).median_s
            flops = shape[0] * ns5_flops(m, n, mode)
            what = f"NS5 alone, one chunk: {shape[0]} x {m} x {n}"
            rows.append(dict(what=what, mode=mode, ms=1e3 * seconds, gflop=flops / 1e9))
        per_token = c["heads"] * sum(k * ns5_flops(m, n, mode) for (m, n), k in wide.items())
        step = build_step(c, mode, "chunk", tokens)
        seconds = _harness.time_callable(step, repeats=args.repeats).median_s / tokens
        what = f"memory_scan, per token ({tokens} tokens)"
        rows.append(dict(what=what, mode=mode, ms=1e3 * seconds, gflop=per_token / 1e9))
    lines = [
        "| what | mode | ms | NS5 GFLOP | NS5 GFLOP/s | % of peak |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        rate = r["gflop"] / (r["ms"] / 1e3)
        r.update(ns5_gflop_per_s=rate, fraction_of_peak=rate / peak)
        lines.append(
            f"| {r['what']} | {r['mode']} | {r['ms']:.2f} | {r['gflop']:.3f} | {rate:.1f} | "
            f"{100 * rate / peak:.0f}% |"
        )
    print("\n".join(lines))
    return rows


def run_auto(args) -> list[dict]:
    """Time short calls (decoding is T = 1) through each form."""
    rows = []
    for tokens in (1, 2, 4, 16):
        times = {}
        for impl in ("reference", "chunk"):
            step = build_step(CONFIGS["titans"], "fwd", impl, tokens)
            times[impl] = _harness.time_callable(step, warmup=2, repeats=15).median_s
        rows.append({"tokens": tokens, **{f"{k}_ms": 1e3 * v for k, v in times.items()}})
        print(
            f"  T={tokens:3d}: reference {1e3 * times['reference']:.2f} ms, "
            f"chunk {1e3 * times['chunk']:.2f} ms"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("titans", "atlas", "muon", "auto"))
    parser.add_argument(
        "--tokens", type=int, default=None, help="tokens for atlas/muon (default: 512)"
    )
    parser.add_argument("--heads", type=int, default=4, help="heads for atlas (default: 4)")
    parser.add_argument(
        "--memory-only", action="store_true", help="atlas: peak memory only, no timing"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved speed-up rounds")
    args = parser.parse_args()
    _harness.set_threads(args.threads)
    peak = _harness.matmul_peak_gflops(2048)
    print(f"fp32 matmul peak, {args.threads} threads: {peak:.1f} GFLOP/s (2048^3, median of 5)")
    results = {"threads": args.threads, "matmul_peak_gflops": peak, "torch": torch.__version__}
    for name, run in (("titans", run_titans), ("atlas", run_atlas), ("muon", run_muon)):
        if args.only in (None, name):
            print(f"\n## {name}")
            results[name] = run(args, peak)
    if args.only in (None, "auto"):
        print("\n## auto: short calls, fwd")
        results["auto"] = run_auto(args)
    out = ROOT / "benchmarks" / "results" / "memory_scan.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
