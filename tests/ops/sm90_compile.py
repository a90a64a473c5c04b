"""Compile the fused Triton kernels for an H100/H200 (sm_90) on a machine without a GPU.

Run as a script by ``test_triton_compiles.py`` (a subprocess: the test process has set
TRITON_INTERPRET, and Triton reads it once, at import). It installs a Triton driver that
reports an sm_90 target and never launches, and makes every kernel launch a compile-only
``warmup``; then it runs ``memory_scan(impl="triton")`` forward and backward and the fused NS5
on CPU tensors, so every kernel is compiled -- Triton's front end, the NVIDIA passes and
ptxas -- with the constexprs and dtypes the real call sites give it. The numbers the kernels
would compute are never produced (the torch code between launches sees uninitialised
buffers); only compilation is checked.

Why: the interpreter accepts code that the compiler rejects. The first H200 run
(2026-12-04) failed every clipped MLP case with "Loop-carried variable _ has initial type
<[16], fp64> but is re-assigned to <[16, 16], fp64>", which no CPU test had seen.

    python tests/ops/sm90_compile.py [--until=ttir|llir|cubin] CASE [CASE ...]
        # one JSON line per kernel: its name and the shared memory it needs (llir, cubin)
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)

import torch
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.jit import JITFunction

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

SM90 = GPUTarget("cuda", 90, 32)
# H100/H200: 227 KB of shared memory per block at most (cudaDevAttrMaxSharedMemoryPerBlockOptin)
MAX_SHARED = 232_448


class CompileOnlyDriver:
    """What ``JITFunction.run`` asks of a driver, for a target that is not there."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return SM90

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")


COMPILED: list[dict] = []


class Stop(Exception):
    """Raised after the last stage asked for, with what that stage left in the metadata."""

    def __init__(self, metadata: dict) -> None:
        self.metadata = metadata


def stop_after(last: str):
    """A stages hook (Triton's documented ``add_stages_inspection_hook``) that drops the
    stages after ``last`` and raises Stop when it is done: "ttir" is the front end (where a
    loop-carried type error shows), "llir" adds layouts and the shared-memory allocation
    (seconds), "cubin" is the whole build, LLVM and ptxas (minutes for the MLP kernels)."""

    def hook(*args):
        if not args:  # JITFunction.run asks for a cache key of the pipeline
            return f"stop-after-{last}", last
        stages = args[1]
        names = list(stages)
        for name in names[names.index(last) + 1 :]:
            del stages[name]
        build = stages[last]

        def build_and_stop(src, metadata):
            build(src, metadata)
            raise Stop(dict(metadata))

        stages[last] = build_and_stop
        return None

    return hook


def _compile_only(run):
    def compile_instead(self, *args, grid, warmup, **kwargs):
        try:
            kernel = run(self, *args, grid=grid, warmup=True, **kwargs)
            shared = kernel.metadata.shared
        except Stop as stop:
            kernel, shared = None, stop.metadata.get("shared")
        COMPILED.append(dict(kernel=self.fn.__name__, shared=shared))
        return kernel

    return compile_instead


# name: (memory, dtype, precision, clip, read, omega window, decay target)
CASES = {
    "linear": ("linear", torch.float32, "ieee", None, "after", 1, False),
    "linear-clip-before-anchored": ("linear", torch.float32, "tf32x3", 0.5, "before", 4, True),
    "mlp": ("mlp", torch.float32, "ieee", None, "after", 1, False),
    "mlp-clip-before-anchored": ("mlp", torch.float32, "ieee", 0.5, "before", 4, True),
    "mlp-clip-anchored": ("mlp", torch.float32, "ieee", 0.5, "after", 1, True),  # the layer's
    "mlp-silu-res-clip-tf32": ("mlp-silu-res", torch.float32, "tf32", 0.5, "after", 2, False),
    "mlp-clip-float64": ("mlp", torch.float64, "ieee", 0.5, "after", 1, False),
}
NS5_CASES = {"ns5": torch.float32, "ns5-bf16": torch.bfloat16}


def scan_case(name: str) -> None:
    import titans_atlas.ops.scan as scan_module
    import titans_atlas.ops.triton.scan as triton_scan
    from helpers import random_inputs, random_weights, scan
    from titans_atlas.ops import LinearMemory, MLPMemory
    from titans_atlas.ops.triton import memory_scan_triton

    # the fused path refuses CPU tensors unless interpreting: here it only compiles
    triton_scan.interpreting = triton_scan.interpreter_requested = lambda: True
    kind, dtype, precision, clip, read, window, anchored = CASES[name]
    memory = {  # the benchmark's widths: heads of 64, hidden 256
        "linear": LinearMemory(dim_in=64, dim_out=64),
        "mlp": MLPMemory(dim_in=64, dim_out=64, expansion=4),
        "mlp-silu-res": MLPMemory(
            dim_in=64, dim_out=64, expansion=4, activation="silu", residual=True
        ),
    }[kind]
    scan_module.IMPLS["triton"] = partial(memory_scan_triton, precision=precision)
    cast = lambda d: {n: x if x is None else x.to(dtype) for n, x in d.items()}  # noqa: E731
    inputs = cast(random_inputs(memory, length=70, window=window))
    weights = cast(random_weights(memory, 2))
    target = {n: w + 0.1 for n, w in weights.items()} if anchored else None
    leaves = [x for x in inputs.values() if x is not None] + list(weights.values())
    for leaf in leaves:
        leaf.requires_grad_(True)
    state = memory.initial_state(weights, 2)
    state = replace(state, momentum={n: torch.zeros_like(m) for n, m in state.momentum.items()})
    # compile-only kernels leave their outputs unwritten: no value checks on them
    y, final = scan(memory, inputs, state, impl="triton", chunk_size=64, omega_window=window,
                    read=read, max_grad_norm=clip, decay_to=target, validate=False)  # fmt: skip
    (y.sum() + sum(w.sum() for w in final.weights.values())).backward()


def ns5_case(name: str) -> None:
    import titans_atlas.ops.triton.newton_schulz as ns5_module
    from titans_atlas.ops.triton.newton_schulz import newton_schulz5_triton

    ns5_module.interpreting = lambda: True  # refuses CPU tensors otherwise; here it only compiles
    x = torch.randn(8, 64, 256, dtype=NS5_CASES[name], requires_grad=True)
    newton_schulz5_triton(x).float().sum().backward()  # the backward that re-runs the steps
    kept = x.detach().requires_grad_(True)
    newton_schulz5_triton(kept, save_iterates=True).float().sum().backward()


def main() -> None:
    args = sys.argv[1:]
    if args[0].startswith("--until="):
        knobs.runtime.add_stages_inspection_hook = stop_after(args.pop(0).partition("=")[2])
    driver.set_active(CompileOnlyDriver())
    JITFunction.run = _compile_only(JITFunction.run)
    for name in args:
        COMPILED.clear()
        (ns5_case if name in NS5_CASES else scan_case)(name)
        for row in COMPILED:
            fits = None if row["shared"] is None else row["shared"] <= MAX_SHARED
            print(json.dumps(dict(case=name, **row, fits=fits)), flush=True)


if __name__ == "__main__":
    main()
