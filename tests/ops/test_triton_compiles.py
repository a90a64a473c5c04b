"""The fused Triton kernels compile for an H100/H200 (sm_90) -- checked without a GPU.

Triton's CPU interpreter (tests/ops/test_triton.py) runs the kernels' Python and accepts code
that the compiler rejects: the first H200 run (2026-12-04) failed every clipped MLP case on a
loop-carried type error no CPU test had seen. ``sm90_compile.py`` (run in a subprocess,
without the interpreter) compiles every kernel at the benchmark's widths for an sm_90 target
that is not there. The front end takes seconds and runs by default; the later stages, which
give the shared memory a kernel needs, take minutes and are marked slow.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton.backends.nvidia.compiler", reason="needs Triton's NVIDIA backend")
knobs = pytest.importorskip("triton.knobs", reason="needs Triton >= 3.4 (its knobs)")
if not hasattr(knobs.runtime, "add_stages_inspection_hook"):
    pytest.skip("needs knobs.runtime.add_stages_inspection_hook", allow_module_level=True)

SCRIPT = Path(__file__).with_name("sm90_compile.py")
SCAN_CASES = [
    "linear",
    "linear-clip-before-anchored",
    "mlp",
    "mlp-clip-anchored",
    "mlp-clip-before-anchored",
    "mlp-silu-res-clip-tf32",
    "mlp-clip-float64",
]
NS5_CASES = ["ns5", "ns5-bf16"]


def compile_for_sm90(until: str, cases: list[str], timeout: float) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton's default, without its warning
    done = subprocess.run(
        [sys.executable, str(SCRIPT), f"--until={until}", *cases],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_every_kernel_passes_the_compilers_front_end_for_sm90():
    rows = compile_for_sm90("ttir", SCAN_CASES + NS5_CASES, timeout=300)
    compiled = {(r["case"], r["kernel"]) for r in rows}
    for case in SCAN_CASES:
        kind = "linear" if case.startswith("linear") else "mlp"
        assert {(case, f"{kind}_forward_kernel"), (case, f"{kind}_backward_kernel")} <= compiled
    for case in NS5_CASES:
        assert {(case, "ns5_forward_kernel"), (case, "ns5_backward_kernel")} <= compiled


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [
        "linear",
        "linear-clip-before-anchored",
        pytest.param(
            "mlp-clip-before-anchored",
            marks=pytest.mark.xfail(
                strict=True,
                reason="at head 64 x hidden 256 the MLP kernels need 344 KB (forward, clip on) "
                "and 541 KB (backward) of shared memory; sm_90 allows 227 KB (docs/gpu.md)",
            ),
        ),
    ],
)
def test_kernels_fit_the_shared_memory_of_sm90(case):
    rows = compile_for_sm90("llir", [case], timeout=900)
    assert rows and all(r["fits"] for r in rows), rows
