"""ATLAS in the engine: Omega window, Muon (per token and per chunk), NS5, polynomial map."""

import itertools
import math
import random

import pytest
import torch

from helpers import (
    MEMORIES,
    assert_close,
    assert_states_close,
    check_parity,
    fresh_state,
    random_inputs,
    random_weights,
    run_both,
    scan,
    setup_case,
    slice_inputs,
)
from titans_atlas.ops import (
    LinearMemory,
    default_polynomial_coefficients,
    newton_schulz5,
    newton_schulz5_reference,
    polynomial_features,
    polynomial_width,
    update_rule_from_muon,
)


@pytest.mark.parametrize("read", ["after", "before"])
@pytest.mark.parametrize("window", [2, 3, 8])
@pytest.mark.parametrize("chunk_size", [1, 3, 5])
@pytest.mark.parametrize("memory_id", ["linear", "mlp", "gated-res", "affine"])
def test_omega_chunk_equals_reference(memory_id, chunk_size, window, read):
    """Windows crossing chunk boundaries; gradients include the Omega gates."""
    memory, inputs, weights, momentum = setup_case(memory_id, length=13, window=window)
    results = run_both(
        memory, inputs, weights, momentum, chunk_size=chunk_size, omega_window=window, read=read
    )
    check_parity(results)


@pytest.mark.parametrize("muon", [True, "chunk"])
@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("chunk_size", [1, 3, 5])
@pytest.mark.parametrize("memory_id", ["linear", "mlp", "mlp3-silu-res", "gated-res", "affine"])
def test_muon_chunk_equals_reference(memory_id, chunk_size, window, muon):
    memory, inputs, weights, momentum = setup_case(memory_id, length=11, window=window)
    for read in ("after", "before"):
        results = run_both(
            memory,
            inputs,
            weights,
            momentum,
            chunk_size=chunk_size,
            omega_window=window,
            muon=muon,
            read=read,
        )
        check_parity(results, rtol=1e-8)


@pytest.mark.parametrize("memory_id", ["mlp", "affine"])  # affine: f(W, 0) != 0
@pytest.mark.parametrize("muon", [False, True, "chunk"])
@pytest.mark.parametrize("chunk_size, window", [(3, 2), (5, 8), (1, 3)])
def test_streaming_with_halo_equals_one_call(chunk_size, window, muon, memory_id):
    rng = random.Random(f"{chunk_size}{window}{muon}")
    memory, length = MEMORIES[memory_id], 17
    inputs = random_inputs(memory, length=length, window=window)
    start = fresh_state(memory, random_weights(memory, 2), 2)
    kwargs = {"chunk_size": chunk_size, "omega_window": window, "muon": muon}
    y_full, s_full = scan(memory, inputs, start, impl="chunk", **kwargs)
    for cuts in (sorted(rng.sample(range(1, length), 4)), list(range(1, length))):
        state, pieces = start, []
        for lo, hi in zip([0, *cuts], [*cuts, length]):
            impl = rng.choice(["chunk", "reference"])
            y, state = scan(memory, slice_inputs(inputs, lo, hi), state, impl=impl, **kwargs)
            pieces.append(y)
        assert_close(torch.cat(pieces, dim=1), y_full, rtol=1e-8, name=f"cuts={cuts}")
        assert_states_close(state, s_full, rtol=1e-8)
        if window > 1:  # the halo holds the last c - 1 keys, head-major
            assert torch.equal(state.halo_keys, inputs["k"][:, 1 - window :].transpose(1, 2))
        else:
            assert state.halo_keys is None


@pytest.mark.parametrize(
    "muon, rule", [(False, "momentum"), (True, "muon"), ("token", "muon"), ("chunk", "muon_chunk")]
)
def test_update_rule_names_the_muon_spellings(muon, rule):
    assert update_rule_from_muon(muon) == rule
    memory, inputs, weights, _ = setup_case("mlp", length=9, window=2)
    state = fresh_state(memory, weights, 2)
    y_muon, s_muon = scan(memory, inputs, state, chunk_size=4, omega_window=2, muon=muon)
    y_rule, s_rule = scan(memory, inputs, state, chunk_size=4, omega_window=2, update_rule=rule)
    assert_close(y_rule, y_muon, rtol=0)
    assert_states_close(s_rule, s_muon, rtol=0)


@pytest.mark.parametrize("muon", [False, True])
def test_window_of_one_with_open_gate_is_titans(muon):
    memory, inputs, weights, _ = setup_case("mlp", length=9)
    state = memory.initial_state(weights, 2)
    y, s = scan(memory, inputs, state, chunk_size=4, muon=muon)
    inputs["omega_gate"] = torch.ones(2, 9, 2, 1, dtype=torch.float64)
    y1, s1 = scan(memory, inputs, state, chunk_size=4, omega_window=1, muon=muon)
    assert_close(y1, y)
    assert_states_close(s1, s)


@pytest.mark.parametrize("impl", ["reference", "chunk"])
def test_gate_opening_only_tap_zero_equals_window_one(impl):
    memory, inputs, weights, _ = setup_case("gated-res", length=12, window=4)
    state = memory.initial_state(weights, 2)
    only_now = torch.zeros_like(inputs["omega_gate"])
    only_now[..., 0] = inputs["omega_gate"][..., 0]
    y_wide, s_wide = scan(
        memory, {**inputs, "omega_gate": only_now}, state, chunk_size=5, omega_window=4, impl=impl
    )
    narrow = {**inputs, "omega_gate": only_now[..., :1]}
    y_one, s_one = scan(memory, narrow, state, chunk_size=5, omega_window=1, impl=impl)
    assert_close(y_wide, y_one)
    assert_states_close(s_wide, s_one)


def test_omega_window_changes_the_result():
    """A sanity check that the taps are used at all."""
    memory, inputs, weights, _ = setup_case("mlp", length=9, window=3)
    state = memory.initial_state(weights, 2)
    y3, _ = scan(memory, inputs, state, chunk_size=4, omega_window=3)
    y1, _ = scan(
        memory, {**inputs, "omega_gate": inputs["omega_gate"][..., :1]}, state, chunk_size=4
    )
    assert (y3 - y1).abs().max() > 1e-3


def plain_ns5(x, steps=5, eps=1e-7):
    """An independent transcription of Muon's zeropower_via_newtonschulz5 (one matrix)."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    transposed = x.size(0) > x.size(1)
    if transposed:
        x = x.T
    x = x / (x.norm() + eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if transposed else x


@pytest.mark.parametrize("shape", [(16, 48), (48, 16), (32, 32), (1, 7)])
def test_ns5_matches_a_plain_implementation(shape):
    x = torch.randn(5, *shape, dtype=torch.float64)
    expected = torch.stack([plain_ns5(m) for m in x])
    assert_close(newton_schulz5_reference(x), expected, rtol=1e-12)
    assert_close(newton_schulz5(x), expected, rtol=1e-10)
    singular = torch.linalg.svdvals(newton_schulz5(x.float()))
    assert singular.min() > 0.6 and singular.max() < 1.25


def test_ns5_fast_form_is_as_precise_as_the_literal_one_in_float32():
    """Low-rank and ill-conditioned momenta are where float32 NS5 loses digits."""
    u, _, vh = torch.linalg.svd(torch.randn(8, 64, 256), full_matrices=False)
    ill = u @ torch.diag_embed(torch.logspace(0, -5, 64)) @ vh
    low_rank = torch.randn(8, 64, 2) @ torch.randn(8, 2, 256)
    for x in (ill, low_rank):
        exact = newton_schulz5_reference(x.double())
        literal_error = (newton_schulz5_reference(x) - exact).abs().max()
        assert (newton_schulz5(x) - exact).abs().max() <= 2 * literal_error + 1e-6


def test_ns5_of_zero_is_zero_with_finite_gradient():
    for fn in (newton_schulz5, newton_schulz5_reference):
        x = torch.zeros(3, 4, 6, requires_grad=True)
        out = fn(x)
        assert torch.equal(out, torch.zeros_like(out))
        out.sum().backward()
        assert torch.isfinite(x.grad).all()


def test_muon_from_zero_momentum_keeps_gradients_finite():
    """The first token's momentum is zero when its gradient is zero (e.g. v = f(k))."""
    memory = LinearMemory(4, 4)
    weights = {"w1": torch.zeros(1, 4, 4, requires_grad=True)}
    inputs = random_inputs(memory, batch=1, length=6, heads=1, dtype=torch.float32)
    inputs["v"][:, :3] = 0.0  # zero weights read zero: no surprise, S stays exactly 0
    for leaf in (inputs["k"], inputs["v"], inputs["lr"]):
        leaf.requires_grad_(True)
    for impl in ("reference", "chunk"):
        y, state = scan(
            memory, inputs, memory.initial_state(weights, 1), chunk_size=2, muon=True, impl=impl
        )
        grads = torch.autograd.grad(
            y.sum() + state.weights["w1"].sum(),
            [inputs["k"], inputs["v"], inputs["lr"], weights["w1"]],
        )
        assert torch.isfinite(y).all() and all(torch.isfinite(g).all() for g in grads)


def monomials_by_loop(x, degree):
    """Every monomial of degree 0..p, combinations with replacement, one at a time."""
    feats = []
    for i in range(degree + 1):
        for combo in itertools.combinations_with_replacement(range(x.shape[-1]), i):
            term = torch.ones_like(x[..., 0])
            for index in combo:
                term = term * x[..., index]
            feats.append(term / math.factorial(i))
    return torch.stack(feats, dim=-1)


@pytest.mark.parametrize("dim, degree", [(1, 3), (3, 2), (4, 3), (5, 1)])
def test_polynomial_map_width_and_values(dim, degree):
    x = torch.randn(2, 3, dim, dtype=torch.float64)
    phi = polynomial_features(x, degree)
    assert phi.shape[-1] == polynomial_width(dim, degree) == math.comb(dim + degree, degree)
    assert_close(phi, monomials_by_loop(x, degree), rtol=1e-12)
    assert polynomial_width(64, 2) == 2145


@pytest.mark.parametrize("dim, degree", [(1, 3), (4, 2), (5, 3), (32, 2)])
def test_polynomial_map_compiles_to_one_graph_with_the_same_monomials(dim, degree):
    """Under torch.compile the monomial table is built from tensor ops (the eager cache is a
    graph break); it must list the same monomials in the same order."""
    x = torch.randn(2, 3, dim, dtype=torch.float64)
    compiled = torch.compile(polynomial_features, fullgraph=True, backend="eager")
    assert torch.equal(compiled(x, degree), polynomial_features(x, degree))


def test_polynomial_map_kernel_identities():
    """With unit coefficients: degree 1 gives 1 + x.y; the degree-2 block gives
    sum_{i<=j} x_i x_j y_i y_j = ((x.y)^2 + sum_i x_i^2 y_i^2) / 2."""
    x, y = torch.randn(2, 7, dtype=torch.float64)
    ones = torch.ones(3, dtype=torch.float64)
    phi_x, phi_y = polynomial_features(x, 2, ones), polynomial_features(y, 2, ones)
    dot = x @ y
    assert_close(phi_x[:8] @ phi_y[:8], 1 + dot, rtol=1e-12)
    assert_close(phi_x[8:] @ phi_y[8:], ((dot**2 + (x**2 * y**2).sum()) / 2), rtol=1e-12)


def test_polynomial_coefficients_scale_blocks_and_get_gradients():
    coefficients = default_polynomial_coefficients(3, torch.float64).requires_grad_()
    assert_close(coefficients.detach(), torch.tensor([1, 1, 1 / 2, 1 / 6], dtype=torch.float64))
    phi = polynomial_features(torch.randn(4, 3, dtype=torch.float64), 3, coefficients)
    phi.sum().backward()
    assert (coefficients.grad != 0).all()
