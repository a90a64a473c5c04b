"""Muon's NS5 fused in Triton (ops/triton/newton_schulz.py) equals the reference iteration, and
``memory_scan(..., impl="triton")`` with a Muon rule equals the per-token reference: outputs,
final state and the gradients of every input. Without CUDA the kernel runs in Triton's CPU
interpreter (tests/conftest.py sets TRITON_INTERPRET=1), in float64.
"""

import pytest
import torch

pytest.importorskip("triton")

from test_inner_stability import target_of
from test_triton import DEVICE, case

from helpers import assert_close, check_parity, random_inputs, random_weights, run_both, scan
from titans_atlas.ops import GatedMLPMemory, MLPMemory, newton_schulz5, newton_schulz5_reference
from titans_atlas.ops.triton import newton_schulz as fused_ns5
from titans_atlas.ops.triton import scan as triton_scan
from titans_atlas.ops.triton.newton_schulz import newton_schulz5_triton

BOTH = ("reference", "triton")


def ns5_and_grad(fn, x: torch.Tensor, probe: torch.Tensor, **kwargs):
    leaf = x.detach().clone().requires_grad_(True)
    out = fn(leaf, **kwargs)
    (out * probe).sum().backward()
    return out.detach(), leaf.grad


@pytest.mark.parametrize(
    "shape", [(1, 1), (3, 5, 7), (2, 16, 40), (2, 9, 4), (2, 3, 20, 33), (4, 17), (1, 7, 100)]
)
@pytest.mark.parametrize("steps", [0, 1, 5])
def test_fused_ns5_equals_reference(shape, steps):
    """Wide and tall matrices, odd sizes (masked tiles), leading batch axes, 0-5 steps."""
    generator = torch.Generator().manual_seed(sum(shape) + steps)
    x = torch.randn(shape, dtype=torch.float64, generator=generator).to(DEVICE)
    probe = torch.randn(shape, dtype=torch.float64, generator=generator).to(DEVICE)
    y, g = ns5_and_grad(newton_schulz5_triton, x, probe, steps=steps)
    y_ref, g_ref = ns5_and_grad(newton_schulz5_reference, x, probe, steps=steps)
    assert_close(y, y_ref, 1e-12, "NS5")
    assert_close(g, g_ref, 1e-10, "gradient")


@pytest.mark.parametrize("shape", [(3, 5, 7), (2, 9, 4), (1, 7, 100)])
@pytest.mark.parametrize("steps", [0, 5])
def test_fused_ns5_saving_its_iterates_equals_reference(shape, steps):
    """save_iterates: the forward keeps X_k and the backward walks them without re-running."""
    generator = torch.Generator().manual_seed(sum(shape) + steps)
    x = torch.randn(shape, dtype=torch.float64, generator=generator).to(DEVICE)
    probe = torch.randn(shape, dtype=torch.float64, generator=generator).to(DEVICE)
    y, g = ns5_and_grad(newton_schulz5_triton, x, probe, steps=steps, save_iterates=True)
    y_ref, g_ref = ns5_and_grad(newton_schulz5_reference, x, probe, steps=steps)
    assert_close(y, y_ref, 1e-12, "NS5")
    assert_close(g, g_ref, 1e-10, "gradient")


def _record_backward_launches(monkeypatch) -> list[bool]:
    """The RECOMPUTE flag of every NS5 backward launch from now on."""
    flags, kernel = [], fused_ns5.ns5_backward_kernel

    class Recorded:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                flags.append(kwargs["RECOMPUTE"])
                return kernel[grid](*args, **kwargs)

            return launch

    monkeypatch.setattr(fused_ns5, "ns5_backward_kernel", Recorded())
    return flags


def test_the_muon_scan_backward_walks_the_iterates_its_recompute_saved(monkeypatch):
    """The scan rebuilds each chunk's momenta under activation checkpointing, which re-runs
    NS5's forward before the backward: that forward keeps the iterates, so no backward
    launch runs the five steps a third time. A plain call still recomputes them."""
    flags = _record_backward_launches(monkeypatch)
    memory, inputs, weights, _ = case("mlp", 7, 1)
    leaf = inputs["k"].detach().requires_grad_(True)  # NS5 lies on the keys' path
    out, _ = scan(memory, inputs | {"k": leaf}, memory.initial_state(weights, 1), chunk_size=3,
                  muon=True, impl="triton")  # fmt: skip
    out.sum().backward()
    assert flags == [False] * 6  # 3 chunks x 2 wide shapes
    x = torch.randn(2, 4, 6, dtype=torch.float64, device=DEVICE, requires_grad=True)
    newton_schulz5_triton(x).sum().backward()
    assert flags[6:] == [True]


def test_fused_ns5_at_zero_matches_the_torch_forms():
    """x = 0: the output is 0 and the gradient that of x / (||x|| + eps) at 0, finite."""
    x, probe = (torch.zeros(2, 4, 6, dtype=torch.float64, device=DEVICE) for _ in range(2))
    probe += 1.0
    y, g = ns5_and_grad(newton_schulz5_triton, x, probe)
    y_ref, g_ref = ns5_and_grad(newton_schulz5, x, probe)
    assert torch.equal(y, y_ref) and bool(torch.isfinite(g).all())
    assert_close(g, g_ref, 1e-12, "gradient at 0")


def test_fused_ns5_float32_and_bfloat16():
    """float32 to float32 rounding of the reference; bf16 inputs computed in fp32, returned
    in bf16 (as ``newton_schulz5``)."""
    x = torch.randn(3, 16, 48, device=DEVICE)
    exact = newton_schulz5_reference(x.double())
    assert_close(newton_schulz5_triton(x).double(), exact, 1e-4, "float32")
    half = newton_schulz5_triton(x.bfloat16())
    assert half.dtype == torch.bfloat16
    assert_close(half.double(), newton_schulz5(x.bfloat16()).double(), 1e-2, "bfloat16")


def test_fused_ns5_bad_arguments_raise():
    x = torch.randn(2, 4, 4, device=DEVICE)
    with pytest.raises(ValueError, match="precision"):
        newton_schulz5_triton(x, precision="fp8")
    with pytest.raises(ValueError, match="steps"):
        newton_schulz5_triton(x, steps=-1)
    with pytest.raises(ValueError, match="x must be"):
        newton_schulz5_triton(torch.randn(3, device=DEVICE))


def test_fused_ns5_refuses_tiles_too_large_to_hold():
    """The limit is in bytes: float32 64 x 256 fits, float64 64 x 256 does not."""
    with pytest.raises(ValueError, match="bytes"):
        newton_schulz5_triton(torch.zeros(1, 64, 256, dtype=torch.float64, device=DEVICE))
    with pytest.raises(ValueError, match="bytes"):
        newton_schulz5_triton(torch.zeros(1, 65, 256, device=DEVICE))


def test_fused_ns5_refuses_cpu_tensors_without_the_interpreter(monkeypatch):
    monkeypatch.setattr(fused_ns5, "interpreting", lambda: False)
    with pytest.raises(ValueError, match="CUDA"):
        newton_schulz5_triton(torch.randn(2, 4, 4))


@pytest.mark.parametrize(
    "memory_id, length, chunk_size, read, window, muon",
    [
        ("mlp", 7, 3, "after", 1, True),
        ("mlp-silu-res", 9, 4, "before", 2, True),
        ("mlp", 7, 3, "after", 2, "chunk"),
        ("linear", 5, 2, "after", 1, True),
    ],
)
def test_muon_scan_with_fused_ns5_equals_reference(
    memory_id, length, chunk_size, read, window, muon
):
    memory, inputs, weights, momentum = case(memory_id, length, window)
    results = run_both(
        memory, inputs, weights, momentum, impls=BOTH, chunk_size=chunk_size, read=read,
        omega_window=window, muon=muon,
    )  # fmt: skip
    check_parity(results)


def test_the_muon_scan_runs_the_fused_ns5(monkeypatch):
    """impl="triton" with Muon goes through the kernel, once per chunk and wide shape."""
    calls = []

    def counted(x, *args, **kwargs):
        calls.append(tuple(x.shape))
        return newton_schulz5_triton(x, *args, **kwargs)

    monkeypatch.setattr(triton_scan, "newton_schulz5_triton", counted)
    memory, inputs, weights, _ = case("mlp", 7, 1)
    scan(memory, inputs, memory.initial_state(weights, 1), chunk_size=3, muon=True, impl="triton")
    # 3 chunks x the two wide shapes of 5 -> 10 -> 3 (W1 5 x 10, W2^T 3 x 10); per-token
    # Muon: every token of a chunk in one call ([G, B, H, C, m, n])
    assert sorted(calls) == sorted([(1, 1, 2, 3, 5, 10), (1, 1, 2, 3, 3, 10)] * 3)


@pytest.mark.parametrize(
    "memory, options",
    [
        (GatedMLPMemory(dim_in=5, dim_out=3), dict(max_grad_norm=0.5)),
        (MLPMemory(dim_in=4, dim_out=4, depth=3), dict(checkpoint=True)),
        (MLPMemory(dim_in=5, dim_out=3, expansion=2), dict(muon="chunk", checkpoint=True)),
    ],
)
def test_muon_scan_with_fused_ns5_any_memory_the_clip_and_checkpointing(memory, options):
    """The Muon path runs the torch chunk loop, so memories the momentum kernels refuse (the
    gated MLP, depth 3) work, as do the per-token clip and per-chunk checkpointing."""
    inputs = {n: x if x is None else x.to(DEVICE) for n, x in
              random_inputs(memory, 2, 7, 2, 2, torch.float64).items()}  # fmt: skip
    weights = {n: w.to(DEVICE) for n, w in random_weights(memory, 2).items()}
    momentum = {n: torch.zeros(2, *w.shape, dtype=w.dtype, device=DEVICE) for n, w in
                weights.items()}  # fmt: skip
    options = dict(chunk_size=3, omega_window=2, muon=True) | options
    check_parity(run_both(memory, inputs, weights, momentum, impls=BOTH, **options))


def test_muon_scan_with_fused_ns5_decaying_to_a_target():
    """decay_to with Muon (docs/memory.md, section 10), per sample; its gradient included."""
    memory, inputs, weights, momentum = case("mlp", 8, window=2, batch=2)
    target = {n: w.to(DEVICE) for n, w in target_of(memory, heads=2, batch=2).items()}
    results = run_both(
        memory, inputs, weights, momentum, impls=BOTH, extra_leaves=target.values(),
        chunk_size=3, omega_window=2, muon=True, decay_to=target,
    )  # fmt: skip
    check_parity(results)
    assert results[1][2][-1].abs().max() > 0


def test_fused_ns5_of_no_matrices():
    x = torch.randn(0, 4, 8, dtype=torch.float64, device=DEVICE, requires_grad=True)
    y = newton_schulz5_triton(x)
    y.sum().backward()
    assert y.shape == x.shape and x.grad.shape == x.shape


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs CUDA (compiled kernels)")
@pytest.mark.parametrize("precision, rtol", [("ieee", 1e-3), ("tf32x3", 1e-3), ("tf32", 3e-2)])
def test_cuda_float32_ns5_at_real_widths_matches_float64(precision, rtol):
    """One chunk's momenta at the GPU benchmark's widths (64 x 256, 1,024 of them)."""
    x = torch.randn(1024, 64, 256, device=DEVICE)
    probe = torch.randn_like(x)
    y, g = ns5_and_grad(newton_schulz5_triton, x, probe, precision=precision)
    y_ref, g_ref = ns5_and_grad(newton_schulz5_reference, x.double(), probe.double())
    assert_close(y.double(), y_ref, rtol, "NS5")
    assert_close(g.double(), g_ref, rtol, "gradient")


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs CUDA (compiled kernels)")
def test_cuda_ns5_past_int32_offsets_matches_the_torch_form():
    """32,768 matrices of 64 x 256: the backward's scratch offsets pass 2^31 elements."""
    x = torch.randn(32768, 64, 256, device=DEVICE)
    probe = torch.randn_like(x)
    y, g = ns5_and_grad(newton_schulz5_triton, x, probe)
    y_ref, g_ref = ns5_and_grad(newton_schulz5, x, probe)
    assert_close(y, y_ref, 1e-3, "NS5")
    assert_close(g, g_ref, 1e-3, "gradient")
