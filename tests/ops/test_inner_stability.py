"""Inner-loop stability options of memory_scan (docs/memory.md, sections 9 and 10): per-token
gradient clipping (``max_grad_norm``) and decay toward a target (``decay_to``).

Float64 parity of the chunked form with the per-token reference -- outputs, final state and
the gradients of every input, the decay target included -- for every memory, awkward lengths,
several chunk sizes, Omega windows and both Muon rules; independent checks of what each
option computes; the clip's gradient at and away from zero; and the stability it buys: the
inner-loop blow-up of the stability study stays finite, a stress stream stays finite, and the
state bound |W| <= max(|W0|, theta g_max Gamma / ((1 - eta) alpha)) holds, tightly.
"""

import random
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from helpers import (
    MEMORIES,
    assert_close,
    assert_states_close,
    check_parity,
    random_inputs,
    random_weights,
    run_both,
    scan,
    setup_case,
    slice_inputs,
)
from titans_atlas.ops import LinearMemory, MLPMemory
from titans_atlas.ops.clipping import clip_scale

# With random_inputs and random_weights, 1.0 sits inside the per-token gradient norms: the clip
# binds on some tokens and not on others (test_the_parity_cases_clip_some_tokens_not_all).
CLIP = 1.0


def clipped_fraction(memory, inputs, weights, max_norm):
    """Fraction of (token, weight) gradients at the initial weights above ``max_norm``."""
    k, v = (inputs[n].transpose(1, 2) for n in ("k", "v"))
    stream = {n: w.unsqueeze(0).expand(k.shape[0], *w.shape) for n, w in weights.items()}
    norms = [a.norm(dim=-1) * b.norm(dim=-1) for a, b in memory.grad_factors(stream, k, v).values()]
    return torch.cat([n.flatten() for n in norms]).gt(max_norm).double().mean().item()


def target_of(memory, heads, batch=None):
    """A decay target unlike the initial weights (per head, or per sample and head)."""
    target = random_weights(memory, heads)
    if batch is not None:
        target = {n: w.unsqueeze(0) + 0.1 * torch.randn(batch, *w.shape) for n, w in target.items()}
    return {n: w + 0.5 for n, w in target.items()}


# --- parity with the reference ------------------------------------------------------------


@pytest.mark.parametrize("memory_id", list(MEMORIES))
def test_the_parity_cases_clip_some_tokens_not_all(memory_id):
    memory, inputs, weights, _ = setup_case(memory_id, length=63)
    assert 0.05 < clipped_fraction(memory, inputs, weights, CLIP) < 0.95


@pytest.mark.parametrize(
    "chunk_size, length", [(1, 1), (1, 7), (1, 63), (3, 7), (3, 63), (3, 100), (8, 1), (8, 100)]
)
@pytest.mark.parametrize("memory_id", list(MEMORIES))
def test_clipped_chunk_equals_reference(memory_id, chunk_size, length):
    memory, inputs, weights, momentum = setup_case(memory_id, length)
    results = run_both(memory, inputs, weights, momentum, chunk_size=chunk_size, max_grad_norm=CLIP)
    check_parity(results)


@pytest.mark.parametrize("read", ["after", "before"])
@pytest.mark.parametrize("window", [2, 3])
@pytest.mark.parametrize("chunk_size", [1, 4])
@pytest.mark.parametrize("memory_id", ["linear", "mlp", "gated-res", "affine"])
def test_clipped_omega_taps_equal_reference(memory_id, chunk_size, window, read):
    """Every tap is clipped on its own, before its Omega gate; taps reaching into the halo are
    re-clipped at the new base weights, as the reference does."""
    memory, inputs, weights, momentum = setup_case(memory_id, length=13, window=window)
    results = run_both(
        memory, inputs, weights, momentum, chunk_size=chunk_size, omega_window=window,
        read=read, max_grad_norm=CLIP,
    )  # fmt: skip
    check_parity(results)


@pytest.mark.parametrize("rule", ["muon", "muon_chunk"])
@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("chunk_size", [1, 3, 5])
@pytest.mark.parametrize("memory_id", ["linear", "mlp", "mlp3-silu-res", "gated-res"])
def test_muon_takes_the_clipped_gradients(memory_id, chunk_size, window, rule):
    memory, inputs, weights, momentum = setup_case(memory_id, length=11, window=window)
    for read in ("after", "before"):
        results = run_both(
            memory, inputs, weights, momentum, chunk_size=chunk_size, omega_window=window,
            update_rule=rule, read=read, max_grad_norm=0.5,
        )  # fmt: skip
        check_parity(results, rtol=1e-8)


@pytest.mark.parametrize("clip", [None, CLIP])
@pytest.mark.parametrize("per_sample", [False, True])
@pytest.mark.parametrize("rule, window", [("momentum", 1), ("momentum", 3), ("muon", 2)])
@pytest.mark.parametrize("memory_id", ["linear", "mlp", "gated-res", "affine"])
def test_decay_to_a_target_equals_reference(memory_id, rule, window, per_sample, clip):
    """Gradients include the decay target's; the target is per head or per sample."""
    memory, inputs, weights, momentum = setup_case(memory_id, length=19, window=window)
    target = target_of(memory, heads=2, batch=2 if per_sample else None)
    for read in ("after", "before"):
        results = run_both(
            memory, inputs, weights, momentum, extra_leaves=target.values(), chunk_size=5,
            omega_window=window, update_rule=rule, read=read, max_grad_norm=clip,
            decay_to=target,
        )  # fmt: skip
        check_parity(results, rtol=1e-8)
        assert results[1][2][-1].abs().max() > 0  # the target's gradient is not trivially 0


def test_decay_to_with_per_chunk_muon_equals_reference():
    memory, inputs, weights, momentum = setup_case("mlp", length=23)
    target = target_of(memory, heads=2)
    results = run_both(
        memory, inputs, weights, momentum, extra_leaves=target.values(), chunk_size=4,
        update_rule="muon_chunk", max_grad_norm=CLIP, decay_to=target,
    )  # fmt: skip
    check_parity(results, rtol=1e-8)


@pytest.mark.parametrize("rule", ["momentum", "muon"])
@pytest.mark.parametrize("memory_id", ["mlp", "affine"])
def test_streaming_in_pieces_with_both_options_equals_one_call(memory_id, rule):
    """Any split, each piece by either form, gives the one-call reference (the chunk grid,
    base weights and halo carry over; the options are per call and the same in every call)."""
    rng = random.Random(memory_id + rule)
    memory, inputs, weights, _ = setup_case(memory_id, length=17, window=2)
    options = dict(chunk_size=4, omega_window=2, update_rule=rule, max_grad_norm=CLIP)
    options["decay_to"] = target_of(memory, heads=2)
    start = memory.initial_state(weights, 2)
    y_ref, s_ref = scan(memory, inputs, start, impl="reference", **options)
    for _ in range(3):
        cuts = sorted(rng.sample(range(1, 17), 4))
        state, pieces = start, []
        for lo, hi in zip([0, *cuts], [*cuts, 17]):
            impl = rng.choice(["reference", "chunk"])
            y, state = scan(memory, slice_inputs(inputs, lo, hi), state, impl=impl, **options)
            pieces.append(y)
        assert_close(torch.cat(pieces, dim=1), y_ref, 1e-9, f"y, cuts={cuts}")
        assert_states_close(state, s_ref)


def test_zero_gradient_factors_keep_finite_exact_gradients():
    """Tokens whose value the memory already predicts (b = 0) and zero keys (a = 0): the
    clip's |a| |b| is 0 there, where a norm's derivative would be 0 / 0."""
    memory = LinearMemory(dim_in=5, dim_out=3)
    inputs = random_inputs(memory, length=9)
    inputs["v"][:, 2] = 0.0  # the linear memory starts at zero: b = k W - v = 0
    inputs["k"][:, 5] = 0.0
    inputs["q"][:, 5] = 0.0
    weights = {"w1": torch.zeros(2, 5, 3, dtype=torch.float64)}
    momentum = {"w1": torch.zeros(2, 2, 5, 3, dtype=torch.float64)}
    results = run_both(memory, inputs, weights, momentum, chunk_size=3, max_grad_norm=0.3)
    check_parity(results)
    assert all(torch.isfinite(g).all() for g in results[1][2])


# --- what the options compute --------------------------------------------------------------


def test_clip_scale_is_the_hard_clip_with_an_exact_gradient():
    a = torch.randn(4, 6, 5, dtype=torch.float64)
    b = torch.randn(4, 6, 3, dtype=torch.float64)
    norm = a.norm(dim=-1, keepdim=True) * b.norm(dim=-1, keepdim=True)
    limit = norm.flatten().sort().values[11:13].mean().item()  # between the middle two
    expected = torch.minimum(torch.ones_like(norm), limit / norm)
    assert_close(clip_scale(a, b, limit), expected, 1e-14, "scale")
    away = (norm - limit).abs().min() > 1e-6  # gradcheck needs no row on the kink
    assert away
    assert torch.autograd.gradcheck(
        lambda a, b: clip_scale(a, b, limit), (a.requires_grad_(), b.requires_grad_())
    )
    zero = torch.zeros(1, 2, 5, dtype=torch.float64, requires_grad=True)
    scale = clip_scale(zero, torch.ones(1, 2, 3, dtype=torch.float64), 1.0)
    (grad,) = torch.autograd.grad(scale.sum(), zero)
    assert scale.eq(1.0).all() and grad.eq(0.0).all()


@pytest.mark.parametrize("impl", ["reference", "token", "chunk"])
def test_one_clipped_step_of_the_linear_memory_by_hand(impl):
    """C = 1, theta = 1, eta = alpha = 0: W1 - W0 = -g min(1, c / |g|_F), g = k^T (k W0 - v),
    computed here with a plain matrix norm."""
    memory = LinearMemory(dim_in=5, dim_out=3)
    inputs = random_inputs(memory, length=1)
    inputs["v"] = 5.0 * inputs["v"]
    for gate, value in (("lr", 1.0), ("momentum", 0.0), ("decay", 0.0)):
        inputs[gate] = torch.full_like(inputs[gate], value)
    weights = random_weights(memory, 2)
    state = memory.initial_state(weights, 2)
    _, after = scan(memory, inputs, state, chunk_size=1, impl=impl, max_grad_norm=0.7)
    k, v = (
        inputs["k"][:, 0, :, :, None],
        inputs["v"][:, 0, :, None, :],
    )  # [B, H, Dk, 1], [B, H, 1, Dv]
    grad = k @ (k.transpose(-1, -2) @ weights["w1"] - v)
    norm = torch.linalg.matrix_norm(grad)[..., None, None]
    assert (norm > 0.7).all()
    assert_close(after.weights["w1"] - weights["w1"], -grad * 0.7 / norm, 1e-12, "step")


@pytest.mark.parametrize("rule", ["momentum", "muon"])
@pytest.mark.parametrize("impl", ["reference", "token", "chunk"])
def test_without_writes_the_weights_relax_toward_the_target(impl, rule):
    """theta = 0: W_t = A + prod_{r<=t} (1 - alpha_r) (W0 - A), in closed form."""
    memory = MLPMemory(dim_in=5, dim_out=3, expansion=2)
    inputs = random_inputs(memory, length=10)
    inputs["lr"] = torch.zeros_like(inputs["lr"])
    weights, target = random_weights(memory, 2), target_of(memory, 2)
    state = memory.initial_state(weights, 2)
    _, after = scan(
        memory, inputs, state, chunk_size=4, impl=impl, update_rule=rule, decay_to=target
    )
    keep = (1 - inputs["decay"]).prod(dim=1)[..., None, None]  # [B, H, 1, 1]
    for name, w in weights.items():
        assert_close(after.weights[name], target[name] + keep * (w - target[name]), 1e-12, name)


# --- stability -----------------------------------------------------------------------------


def blowup_case(batch=4, heads=2, dim=32, length=256, chunk=16, value_scale=8.0):
    """The stability study's inner loop alone (REPORT.md, table C): keys as the layer makes
    them, values SiLU(.) x 8 (|v| ~ 27), constant gates with C theta / (1 - eta) = 1."""
    gen = torch.Generator().manual_seed(0)
    memory = MLPMemory(dim_in=dim, dim_out=dim, expansion=4)
    weights = memory.init_weights(heads, generator=gen)
    shape = (batch, length, heads, dim)
    k = F.normalize(F.silu(torch.randn(*shape, generator=gen)), dim=-1)
    q = F.normalize(F.silu(torch.randn(*shape, generator=gen)), dim=-1)
    v = F.silu(torch.randn(*shape, generator=gen)) * value_scale
    eta = 0.9
    gates = [torch.full(shape[:3], x) for x in ((1 - eta) / chunk, eta, 0.003)]
    return memory, weights, (q, k, v, *gates), chunk


def weight_norm(state):
    """Largest per-(sample, head) Frobenius norm over the weight matrices."""
    return max(w.flatten(2).norm(dim=-1).max().item() for w in state.weights.values())


def test_the_inner_loop_that_blew_up_stays_finite_with_the_clip():
    memory, weights, inputs, chunk = blowup_case()
    start = memory.initial_state(weights, 4)
    with torch.no_grad():
        _, plain = memory_scan_of(memory, inputs, start, chunk)
        y, clipped = memory_scan_of(memory, inputs, start, chunk, max_grad_norm=1.0)
    assert not weight_norm(plain) < 1e30  # inf or NaN within 16 chunks: the bug
    assert torch.isfinite(y).all()
    assert weight_norm(clipped) <= weight_norm(start)  # only decays toward 0 from LeCun init


def memory_scan_of(memory, inputs, state, chunk, **options):
    from titans_atlas.ops import memory_scan

    return memory_scan(memory, *inputs, state, chunk_size=chunk, validate=False, **options)


def test_stress_values_x64_gates_at_their_limits_stay_finite():
    """Values x 64, theta at lr_max, eta at 0.9, alpha at 1e-3 (the layer's limits), Omega
    window 2, 2,048 tokens: finite, and within the bound of section 9."""
    memory, weights, inputs, chunk = blowup_case(length=2048, value_scale=64.0, chunk=64)
    q, k, v, lr = inputs[:4]
    theta, eta, alpha = 0.02, 0.9, 1e-3
    gates = [torch.full_like(lr, x) for x in (theta, eta, alpha)]
    omega = torch.ones(*lr.shape, 2)
    start = memory.initial_state(weights, 4)
    with torch.no_grad():
        y, state = memory_scan_of(
            memory, (q, k, v, *gates), start, chunk, omega_window=2, omega_gate=omega,
            max_grad_norm=1.0,
        )  # fmt: skip
    assert torch.isfinite(y).all()
    bound = max(weight_norm(start), theta * 1.0 * 2 / ((1 - eta) * alpha))
    assert weight_norm(state) <= bound


@pytest.mark.parametrize("chunk_size", [1, 16])
def test_the_state_bound_holds_and_is_tight(chunk_size):
    """Linear memory, one key, a value far away: every gradient points the same way, so the
    weights approach the bound g_max theta Gamma / ((1 - eta) alpha) from below. Without the
    clip the same stream runs ~1e5 times past it."""
    memory = LinearMemory(dim_in=4, dim_out=4)
    length, theta, eta, alpha, g_max = 600, 0.3, 0.8, 0.05, 0.5
    k = F.normalize(torch.ones(1, length, 1, 4, dtype=torch.float64), dim=-1)
    v = torch.full((1, length, 1, 4), 1e6, dtype=torch.float64)
    gates = [torch.full((1, length, 1), x, dtype=torch.float64) for x in (theta, eta, alpha)]
    start = memory.initial_state(memory.init_weights(1, dtype=torch.float64), 1)
    bound = g_max * theta / ((1 - eta) * alpha)
    _, clipped = memory_scan_of(memory, (k, k, v, *gates), start, chunk_size, max_grad_norm=g_max)
    _, plain = memory_scan_of(memory, (k, k, v, *gates), start, chunk_size)
    assert 0.999 * bound <= weight_norm(clipped) <= bound * (1 + 1e-12)
    assert weight_norm(plain) > 1e4 * bound


def test_the_bound_holds_toward_a_target():
    """With decay_to the distance to the target obeys the same bound."""
    memory, weights, inputs, chunk = blowup_case(length=1024, value_scale=64.0)
    q, k, v, lr = inputs[:4]
    theta, eta, alpha = 0.05, 0.9, 0.01
    gates = [torch.full_like(lr, x) for x in (theta, eta, alpha)]
    target = {n: w + 1.0 for n, w in weights.items()}
    start = memory.initial_state(weights, 4)
    with torch.no_grad():
        _, state = memory_scan_of(
            memory, (q, k, v, *gates), start, chunk, max_grad_norm=1.0, decay_to=target
        )
    distance = replace(state, weights={n: w - target[n] for n, w in state.weights.items()})
    initial = replace(start, weights={n: w - target[n] for n, w in start.weights.items()})
    assert weight_norm(distance) <= max(weight_norm(initial), theta / ((1 - eta) * alpha))
