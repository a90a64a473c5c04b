"""Mixed precision: the memory state stays fp32 under bf16 autocast, and results stay close
to the fp32 run (bf16 rounding only enters through the inputs)."""

import pytest
import torch
import torch.nn.functional as F

import titans_atlas as ta
from helpers import MEMORIES, assert_close, assert_states_close, random_inputs, scan
from titans_atlas.ops import MLPMemory, newton_schulz5, newton_schulz5_reference

ATLAS_MEMORY = MLPMemory(dim_in=8, dim_out=8, expansion=4, residual=True)  # ATLAS's, smaller


def test_state_stays_fp32_under_bf16_autocast():
    memory = MEMORIES["mlp"]
    inputs = random_inputs(memory, length=20, dtype=torch.float32)
    state = memory.initial_state(memory.init_weights(2), 2)
    y32, _ = scan(memory, inputs, state, chunk_size=8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, s = scan(memory, inputs, state, chunk_size=8)
    assert all(w.dtype == torch.float32 for w in [*s.weights.values(), *s.momentum.values()])
    assert y.dtype == torch.float32  # y comes back in the input dtype
    torch.testing.assert_close(y, y32, rtol=0, atol=1e-6)  # nothing ran in bf16


def test_bf16_inputs_compute_in_the_state_precision():
    memory = MEMORIES["gated"]
    inputs = random_inputs(memory, length=20, dtype=torch.float32)
    state = memory.initial_state(memory.init_weights(2), 2)
    y32, _ = scan(memory, inputs, state, chunk_size=8)
    low = {n: None if x is None else x.bfloat16() for n, x in inputs.items()}
    y, s = scan(memory, low, state, chunk_size=8)
    assert y.dtype == torch.bfloat16
    assert all(w.dtype == torch.float32 for w in s.weights.values())
    assert (y.float() - y32).abs().max() < 0.05 * y32.abs().max()


def test_model_under_bf16_autocast_keeps_an_fp32_memory_and_streams():
    torch.manual_seed(0)
    model = ta.create_model(
        "mag", vocab_size=50, dim=32, depth=2, num_heads=2, window=8, chunk_size=4
    )
    ids = torch.randint(0, 50, (2, 17))
    with torch.no_grad():
        reference, _ = model(ids)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, state = model(ids)
            first, streamed = model(ids[:, :9])
            rest, _ = model(ids[:, 9:], streamed)
    memory = state.blocks[0]["memory"].memory
    assert all(w.dtype == torch.float32 for w in memory.weights.values())
    assert torch.isfinite(logits).all()
    assert (logits.float() - reference).abs().max() < 0.1 * reference.abs().max()
    assert (torch.cat([first, rest], 1).float() - logits.float()).abs().max() < 0.05


def cuda_autocast_inputs(memory, batch=2, length=11, heads=2, window=3):
    """q, k, v and gates as the memory layer makes them under CUDA bf16 autocast: projections
    and gates come out of bf16 matmuls, but CUDA autocast runs the ``norm`` inside
    ``F.normalize`` in fp32, so x / ||x|| is promoted to fp32 while v stays bf16. CPU autocast
    keeps the norm in bf16, so this is built by hand: the suite guards the CUDA case on CPU."""
    width = heads * memory.dim_in
    x = torch.randn(batch, length, 16)
    to_qkv = torch.nn.Linear(16, 2 * width + heads * memory.dim_out, bias=False)
    to_gates = torch.nn.Linear(16, heads * (3 + window))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q, k, v = to_qkv(x).split([width, width, heads * memory.dim_out], dim=-1)
        gates = torch.sigmoid(to_gates(x)).unflatten(-1, (3 + window, heads)).transpose(-1, -2)
    q, k, v = (z.unflatten(-1, (heads, -1)) for z in (F.silu(q), F.silu(k), F.silu(v)))
    q, k = (z / z.float().norm(dim=-1, keepdim=True).clamp_min(1e-12) for z in (q, k))
    inputs = {"q": q, "k": k, "v": v, "lr": 0.1 * gates[..., 0], "momentum": gates[..., 1]}
    inputs.update(decay=0.1 * gates[..., 2], omega_gate=gates[..., 3:])
    assert (q.dtype, k.dtype, v.dtype) == (torch.float32, torch.float32, torch.bfloat16)
    assert all(inputs[n].dtype == torch.bfloat16 for n in ("lr", "momentum", "omega_gate"))
    return inputs


@pytest.mark.parametrize("muon", [False, True])
@pytest.mark.parametrize("impl", ["chunk", "reference", "token"])
def test_mixed_dtypes_from_cuda_autocast_promote_to_the_state_precision(impl, muon):
    """Regression for issue 16: fp32 q, k beside bf16 v and gates raised "q, k, v must match"."""
    memory = MEMORIES["mlp"]
    with torch.no_grad():
        inputs = cuda_autocast_inputs(memory)
    state = memory.initial_state(memory.init_weights(2), 2)
    kwargs = dict(chunk_size=4, omega_window=3, muon=muon, impl=impl)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, s = scan(memory, inputs, state, **kwargs)
    assert y.dtype == torch.float32  # the promoted dtype of q, k, v
    assert all(w.dtype == torch.float32 for w in [*s.weights.values(), *s.momentum.values()])
    # The same values in fp32 give the same result: nothing ran in bf16 inside.
    y32, s32 = scan(memory, {n: x.float() for n, x in inputs.items()}, state, **kwargs)
    assert_close(y, y32, rtol=1e-6)
    assert_states_close(s, s32, rtol=1e-6)


def test_output_dtype_is_the_promotion_of_q_k_v():
    memory = MEMORIES["linear"]
    inputs = random_inputs(memory, length=5, dtype=torch.float32)
    state = memory.initial_state(memory.init_weights(2), 2)
    for dtypes, expected in [
        ((torch.bfloat16,) * 3, torch.bfloat16),
        ((torch.float32, torch.float32, torch.bfloat16), torch.float32),
        ((torch.float16, torch.bfloat16, torch.bfloat16), torch.float32),
        ((torch.float64, torch.float32, torch.float32), torch.float64),
    ]:
        cast = {n: x.to(d) for (n, x), d in zip(list(inputs.items())[:3], dtypes)}
        for length in (5, 0):  # the empty call too
            pieces = {n: x[:, :length] for n, x in {**inputs, **cast}.items() if x is not None}
            y, _ = scan(memory, pieces, state, chunk_size=2)
            assert y.dtype == expected, (dtypes, length)


@pytest.mark.parametrize("scale", [1e-4, 1.0, 1e3])
@pytest.mark.parametrize("rank", [2, 16])
def test_ns5_of_float16_input_is_float16_and_exact_to_1e3(scale, rank):
    """Issue 13: NS5 summed fp16 squares for its norm (entries below ~2e-4 underflow, above
    256 overflow), so the "normalised" matrix had norm != 1 and the iterates exploded. NS5 now
    computes in fp32 and returns fp16, within 1e-3 of float64 NS5 of the same fp16 values."""
    x = (scale * torch.randn(6, 16, rank) @ torch.randn(6, rank, 64)).half()
    exact = newton_schulz5_reference(x.double())
    for ns5 in (newton_schulz5, newton_schulz5_reference):
        out = ns5(x)
        assert out.dtype == torch.float16 and torch.isfinite(out).all()
        assert_close(out.double(), exact, rtol=1e-3)


def atlas_muon_in(dtype, inputs, weights, impl):
    memory = ATLAS_MEMORY
    cast = {n: x.to(dtype) for n, x in inputs.items()}
    state = memory.initial_state({n: w.to(dtype) for n, w in weights.items()}, 2)
    kwargs = dict(chunk_size=8, omega_window=4, update_rule="muon", impl=impl)
    return scan(memory, cast, state, **kwargs)


@pytest.mark.parametrize("impl", ["chunk", "reference", "token"])
@pytest.mark.parametrize("surprise", ["typical", "small"])
def test_atlas_style_muon_in_float16_is_finite_and_close_to_float32(impl, surprise):
    """The ATLAS memory (residual MLP, Omega window, per-token Muon) with an fp16 state against
    the same fp16 values run in fp32. Typical surprises: y within 1e-2, weights within 3e-2.
    Small surprises (values the memory nearly predicts, momenta ~1e-4) gave NaN before the
    fix; NS5 is scale-invariant, so it lifts the fp16 rounding noise of such momenta to O(1)
    directions: y stays within 0.2 -- the precision an fp16 state affords Muon (autocast keeps
    the state fp32)."""
    memory = ATLAS_MEMORY
    inputs = random_inputs(memory, length=24, window=4, dtype=torch.float32)
    weights = memory.init_weights(2)
    if surprise == "small":
        reads = memory.forward(
            memory.initial_state(weights, 2).weights, inputs["k"].transpose(1, 2)
        )
        inputs["v"] = reads.transpose(1, 2) + 1e-3 * inputs["v"]
    inputs = {n: x.half().float() for n, x in inputs.items()}  # the same values in both runs
    weights = {n: w.half().float() for n, w in weights.items()}
    y16, s16 = atlas_muon_in(torch.float16, inputs, weights, impl)
    y32, s32 = atlas_muon_in(torch.float32, inputs, weights, impl)
    assert y16.dtype == torch.float16 and torch.isfinite(y16).all()
    y_tolerance, weight_tolerance = (1e-2, 3e-2) if surprise == "typical" else (0.2, 1.0)
    assert_close(y16.float(), y32, rtol=y_tolerance, name="y")
    for name in weights:
        assert torch.isfinite(s16.weights[name]).all()
        assert_close(s16.weights[name].float(), s32.weights[name], weight_tolerance, name)
