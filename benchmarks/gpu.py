"""GPU benchmark of the memory (issue 16): the memory layer and ``memory_scan`` alone, ours
(torch chunked form vs the fused Triton kernels) vs titans-pytorch's ``NeuralMemory``, bf16
and fp32 side by side, with kernel launches per forward and the fraction of the matmul peak.

    python benchmarks/gpu.py --device cuda              # the issue's shapes, a few minutes
    python benchmarks/gpu.py --device cpu --tiny        # smoke test (Triton's CPU interpreter)

Shapes (issue 16): dim 1024, 16 heads x 64, MLP memory x4 (GELU), chunk 64, batch 2 x 4,096
tokens. ``--tiny``: dim 32, 2 heads, chunk 8, 1 x 32 tokens, one timed call.

* **layer**: ``layers.NeuralMemory`` (projections, convs, gates, scan, norm, output gate) vs
  titans-pytorch 0.5.5 ``NeuralMemory`` (heads 16, dim_head 64, chunk 64, batch_size 64 so its
  weights advance once per chunk), when importable (docs/gpu.md: carrying its wheels).
  bf16 = the step under ``torch.autocast(bfloat16)`` with fp32 parameters.
* **op**: ``memory_scan`` alone with inputs as the layer makes them (memory state fp32).
  TFLOP/s count the torch chunked form's matmul FLOPs (``FlopCounterMode``, forward or
  forward+backward) for every implementation -- the same useful work; the fused backward's
  recomputation is not credited.
* **ns5**: one chunk of per-token Muon's NS5 (every token's momentum of both weights of a
  residual MLP memory, 64 x 256 per head at these shapes): ``ops.newton_schulz5`` (three
  batched BLAS calls a step) vs the fused ``newton_schulz5_triton``; TFLOP/s of the NS5 count
  (memory_scan.py's count: the backward credited with one recompute).
* **kernels**: GPU kernels launched by one forward (``torch.profiler``); on the CPU the count
  of CPU-side operator events instead, labelled so.
* **peak**: an n^3 ``torch.matmul`` in bf16 and in fp32 (TF32 off), measured in the same run.

Rows that fail (e.g. bf16 autocast before issue 16's item 1 lands) are reported with their
error instead of stopping the run. Results: a markdown table and ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

if __name__ == "__main__" and " ".join(sys.argv).replace("=", " ").find("--device cpu") >= 0:
    # Triton's CPU interpreter is chosen when triton is first imported, which the imports
    # below do (torch's flop counter): set it first.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
SHAPES = dict(dim=1024, heads=16, expansion=4, chunk=64, batch=2, tokens=4096)
TINY = dict(dim=32, heads=2, expansion=4, chunk=8, batch=1, tokens=32)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
MODES = ("fwd", "fwdbwd")
CASES = ("op", "layer", "ns5", "titans-pytorch")


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def median_time(step, device: str, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_peak_tflops(dtype: torch.dtype, device: str, n: int) -> float:
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    seconds = median_time(lambda: a @ b, device, warmup=3, repeats=10)
    return 2 * n**3 / seconds / 1e12


def launches(step, device: str) -> int:
    """GPU kernels (CUDA) or CPU operator events (CPU) of one call of ``step``."""
    from torch.profiler import ProfilerActivity, profile

    activity = ProfilerActivity.CUDA if device == "cuda" else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        step()
        sync(device)
    kind = torch.autograd.DeviceType.CUDA if device == "cuda" else torch.autograd.DeviceType.CPU
    return sum(1 for e in prof.events() if e.device_type == kind)


def register_triton(args) -> dict:
    """Apply the launch configuration asked for; return it."""
    from titans_atlas.ops.triton import autograd

    for name in ("hidden_tile", "num_warps", "num_stages"):
        if getattr(args, name) is not None:
            setattr(autograd, name.upper(), getattr(args, name))
    return dict(hidden_tile=autograd.HIDDEN_TILE, num_warps=autograd.NUM_WARPS,
                num_stages=autograd.NUM_STAGES)  # fmt: skip


def select_impl(impl: str) -> str:
    """The ``memory_scan`` impl of a benchmark variant: "triton-tf32x3" runs impl="triton" with
    ``tl.dot`` precision "tf32x3" (until the next selection), "triton" with "ieee"."""
    import titans_atlas.ops.scan as scan_module

    name, _, precision = impl.partition("-")
    if name == "triton":
        from titans_atlas.ops.triton import memory_scan_triton

        scan_module.IMPLS["triton"] = partial(memory_scan_triton, precision=precision or "ieee")
    return name


def layer_step(impl: str, shape: dict, dtype: str, mode: str, device: str):
    """Our memory layer; ``impl`` "chunk" or a registered Triton variant."""
    from titans_atlas.layers.neural_memory import MemoryConfig, NeuralMemory

    torch.manual_seed(0)
    config = MemoryConfig(model="mlp", expansion=shape["expansion"], chunk_size=shape["chunk"],
                          decay_target=shape["decay_target"])  # fmt: skip
    layer = NeuralMemory(shape["dim"], shape["heads"], config).to(device)
    layer.set_runtime(impl=select_impl(impl))
    x = torch.randn(shape["batch"], shape["tokens"], shape["dim"], device=device)
    return _module_step(lambda: layer(x)[0], [x, *layer.parameters()], dtype, mode, device)


def titans_pytorch_step(shape: dict, dtype: str, mode: str, device: str):
    from titans_pytorch import NeuralMemory

    torch.manual_seed(0)
    memory = NeuralMemory(
        dim=shape["dim"], heads=shape["heads"], dim_head=shape["dim"] // shape["heads"],
        chunk_size=shape["chunk"], batch_size=shape["chunk"],
        default_model_kwargs=dict(depth=2, expansion_factor=float(shape["expansion"])),
    ).to(device)  # fmt: skip
    x = torch.randn(shape["batch"], shape["tokens"], shape["dim"], device=device)
    return _module_step(lambda: memory(x)[0], [x, *memory.parameters()], dtype, mode, device)


def _module_step(forward, leaves, dtype: str, mode: str, device: str):
    def run():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            return forward()

    if mode == "fwd":
        return lambda: _no_grad(run)
    leaves = [t.requires_grad_(True) for t in leaves if t.is_floating_point()]

    def step():
        run().float().sum().backward()
        for t in leaves:
            t.grad = None

    return step


def op_step(impl: str, shape: dict, dtype: str, mode: str, device: str):
    """``memory_scan`` alone, inputs as the layer makes them, fp32 memory state."""
    from titans_atlas.ops import MLPMemory, memory_scan

    torch.manual_seed(0)
    head = shape["dim"] // shape["heads"]
    memory = MLPMemory(head, head, expansion=shape["expansion"])
    weights = {n: w.to(device) for n, w in memory.init_weights(shape["heads"]).items()}
    size = (shape["batch"], shape["tokens"], shape["heads"])
    cast = lambda x: x.to(device, DTYPES[dtype])  # noqa: E731
    q, k = (cast(F.normalize(torch.randn(*size, head), dim=-1)) for _ in range(2))
    v = cast(torch.randn(*size, head))
    gates = [cast(0.005 * torch.rand(size)), cast(torch.rand(size)), cast(0.003 * torch.rand(size))]

    name = select_impl(impl)

    def run():
        state = memory.initial_state(weights, shape["batch"])
        y, state = memory_scan(memory, q, k, v, *gates, state, chunk_size=shape["chunk"], impl=name)
        return y.float().sum() + sum(w.sum() for w in state.weights.values())

    if mode == "fwd":
        return lambda: _no_grad(run)
    leaves = [q, k, v, *gates, *weights.values()]
    for t in leaves:
        t.requires_grad_(True)

    def step():
        run().backward()
        for t in leaves:
            t.grad = None

    return step


def ns5_matrices(shape: dict) -> tuple[int, int, int]:
    """One chunk of per-token Muon on the residual MLP memory (head -> x4 -> head): both
    weights are head x (x4 head) wide, one momentum per token, weight, head and sample."""
    head = shape["dim"] // shape["heads"]
    count = 2 * shape["batch"] * shape["heads"] * shape["chunk"]
    return count, head, shape["expansion"] * head


def ns5_step(impl: str, shape: dict, dtype: str, mode: str, device: str):
    """One chunk's NS5: the torch form (``ops.newton_schulz5``) or the fused kernel."""
    from titans_atlas.ops import newton_schulz5

    if impl == "triton":
        from titans_atlas.ops.triton.newton_schulz import newton_schulz5_triton as newton_schulz5
    torch.manual_seed(0)
    x = torch.randn(ns5_matrices(shape), device=device, dtype=DTYPES[dtype])
    if mode == "fwd":
        return lambda: _no_grad(lambda: newton_schulz5(x))
    x.requires_grad_(True)
    probe = torch.randn_like(x)

    def step():
        (newton_schulz5(x) * probe).sum().backward()
        x.grad = None

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


def measure(name: str, build, args, shape: dict, flops: dict | None = None) -> list[dict]:
    """Time ``build(...)`` per dtype and mode; ``flops`` [(dtype, mode)]: the op's FLOPs."""
    rows = []
    for dtype in args.dtypes:
        for mode in args.modes:
            row = dict(case=name, dtype=dtype, mode=mode)
            try:
                step = build(shape=shape, dtype=dtype, mode=mode, device=args.device)
                seconds = median_time(step, args.device, args.warmup, args.repeats)
                row.update(
                    ms=1e3 * seconds, tokens_per_s=shape["batch"] * shape["tokens"] / seconds
                )
                if mode == "fwd":
                    row["launches"] = launches(step, args.device)
                if flops is not None:
                    row["tflops"] = flops[(dtype, mode)] / seconds / 1e12
            except Exception as error:  # a failing row is a result, not the end of the run
                row["error"] = f"{type(error).__name__}: {str(error)[:160]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def table(rows: list[dict], peaks: dict, launch_unit: str) -> str:
    head = (
        f"| case | dtype | mode | ms | tokens/s | {launch_unit} / fwd | TFLOP/s "
        "| % bf16 peak | % fp32 peak |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['case']} | {r['dtype']} | {r['mode']} | {r['error']} |||||")
            continue
        tf = r.get("tflops")
        rate = "| | |" if tf is None else (
            f"{tf:.2f} | {100 * tf / peaks['bf16']:.2f}% | {100 * tf / peaks['fp32']:.1f}% |"
        )  # fmt: skip
        lines.append(
            f"| {r['case']} | {r['dtype']} | {r['mode']} | {r['ms']:.2f} | "
            f"{r['tokens_per_s']:,.0f} | {r.get('launches', '')} | {rate}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (smoke test)")
    parser.add_argument("--decay-target", choices=("zero", "init"), default="zero",
                        help="the layer's decay target (init: the training presets')")  # fmt: skip
    parser.add_argument("--dtypes", nargs="+", choices=tuple(DTYPES), default=list(DTYPES))
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls (2; tiny 1)")
    parser.add_argument("--impls", nargs="+", default=["chunk", "triton", "triton-tf32x3"])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES),
                        help="which rows to time (default: all)")  # fmt: skip
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--hidden-tile", type=int, help="MLP kernels' hidden tile (default 64)")
    parser.add_argument("--num-warps", type=int, help="warps per program (default 8)")
    parser.add_argument("--num-stages", type=int, help="software pipelining (default 1)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu.json")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    shape = dict(TINY if args.tiny else SHAPES, decay_target=args.decay_target)
    args.repeats = args.repeats or (1 if args.tiny else 5)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 2)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as the torch form runs

    n = 256 if args.tiny else 8192
    peaks = {d: matmul_peak_tflops(DTYPES[d], args.device, n) for d in DTYPES}
    print(json.dumps({"device": args.device, "shape": shape, "peak_tflops": peaks}), flush=True)
    launch = register_triton(args)
    flops = {
        (dtype, mode): counted_flops(op_step("chunk", shape, dtype, mode, args.device))
        for dtype in args.dtypes
        for mode in args.modes
    }
    rows = []
    for impl in args.impls if "op" in args.cases else ():
        rows += measure(f"op {impl}", partial(op_step, impl), args, shape, flops)
    for impl in args.impls if "layer" in args.cases else ():
        rows += measure(f"layer {impl}", partial(layer_step, impl), args, shape)
    if "ns5" in args.cases:
        # NS5 rows: "tokens/s" are the chunk's tokens of per-token Muon (batch x chunk a call)
        from memory_scan import ns5_flops  # benchmarks/: the same count as the CPU benchmark

        count, m, n = ns5_matrices(shape)
        ns5 = {(d, m_): count * ns5_flops(m, n, m_) for d in args.dtypes for m_ in args.modes}
        for impl in ("torch", "triton"):
            ns5_shape = dict(shape, tokens=shape["chunk"])
            rows += measure(f"ns5 {impl} ({count} x {m} x {n})", partial(ns5_step, impl), args,
                            ns5_shape, ns5)  # fmt: skip
    try:
        if "titans-pytorch" in args.cases:
            import titans_pytorch  # noqa: F401

            rows += measure("layer titans-pytorch", titans_pytorch_step, args, shape)
    except ImportError:
        print("titans-pytorch not importable: its rows are skipped (docs/gpu.md)")
    unit = "kernels" if args.device == "cuda" else "CPU op events"
    print(table(rows, peaks, unit))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = dict(
        device=torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        torch=torch.__version__, shape=shape, launch=launch, peak_tflops=peaks, rows=rows,
    )  # fmt: skip
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
