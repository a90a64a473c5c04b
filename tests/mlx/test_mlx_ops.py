"""The MLX memory engine against the torch one: float32 parity of outputs and final state for
every memory model, chunk size, awkward length, Omega window, Muon rule and read mode; the
feature map and NS5; streaming; gradients through ``mx.grad`` against torch autograd; input
validation."""

import random

import pytest

mx = pytest.importorskip("mlx.core")

import numpy as np
import torch

import titans_atlas.mlx.ops as mops
from helpers import INPUT_NAMES, MEMORIES, fresh_state, random_inputs, random_weights
from mlx_helpers import (
    RTOL_F32,
    RTOL_F64,
    assert_close,
    assert_states_close,
    mirror_memory,
    mlx_scan,
    mlx_state,
    to_mx,
    torch_scan,
)
from titans_atlas.mlx.ops.scan_chunk import unbind
from titans_atlas.ops import newton_schulz5_reference, polynomial_features

RULES = {  # name -> (omega_window, muon)
    "momentum": (1, False),
    "omega": (3, False),
    "muon": (1, True),
    "muon-chunk": (1, "chunk"),
    "omega-muon": (2, True),
}


def case(memory_id, length, window=1, dtype=torch.float32, batch=2, heads=2):
    memory = MEMORIES[memory_id]
    inputs = random_inputs(memory, batch, length, heads, window, dtype)
    weights = random_weights(memory, heads, dtype)
    momentum = fresh_state(memory, weights, batch).momentum
    return memory, inputs, weights, momentum


def check_against_torch(memory_id, length, chunk_size, rule, read, impl):
    window, muon = RULES[rule]
    memory, inputs, weights, momentum = case(memory_id, length, window)
    options = {"chunk_size": chunk_size, "omega_window": window, "muon": muon, "read": read}
    y_ref, s_ref = torch_scan(memory, inputs, weights, momentum, **options)
    memory_mx = mirror_memory(memory)
    start = mlx_state(memory_mx, weights, momentum, inputs["q"].shape[0])
    y, state = mlx_scan(memory_mx, inputs, start, impl=impl, **options)
    assert y.dtype == mx.float32
    assert_close(y, y_ref, RTOL_F32, "y")
    assert_states_close(state, s_ref, RTOL_F32)


@pytest.mark.parametrize("length", [1, 7, 19])
@pytest.mark.parametrize("chunk_size", [1, 3, 8])
@pytest.mark.parametrize("memory_id", list(MEMORIES))
def test_chunked_scan_matches_torch(memory_id, chunk_size, length):
    check_against_torch(memory_id, length, chunk_size, "momentum", "after", "chunk")


@pytest.mark.parametrize("impl", ["chunk", "reference"])
@pytest.mark.parametrize("read", ["after", "before"])
@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("memory_id", ["linear", "mlp3-silu-res", "gated", "affine"])
def test_rules_match_torch(memory_id, rule, read, impl):
    check_against_torch(memory_id, 11, 4, rule, read, impl)


@pytest.mark.parametrize("impl", ["chunk", "reference"])
@pytest.mark.parametrize("rule", ["momentum", "omega", "omega-muon", "muon-chunk"])
@pytest.mark.parametrize("memory_id", ["mlp", "gated-res", "affine"])
def test_clip_and_decay_target_match_torch(memory_id, rule, impl):
    """max_grad_norm (binding on some tokens) and decay_to (per head) as on the torch side."""
    window, muon = RULES[rule]
    memory, inputs, weights, momentum = case(memory_id, 11, window)
    target = {n: w + 0.5 for n, w in random_weights(memory, 2, torch.float32).items()}
    options = {"chunk_size": 4, "omega_window": window, "muon": muon, "max_grad_norm": 1.0}
    y_ref, s_ref = torch_scan(memory, inputs, weights, momentum, decay_to=target, **options)
    memory_mx = mirror_memory(memory)
    start = mlx_state(memory_mx, weights, momentum, 2)
    y, state = mlx_scan(memory_mx, inputs, start, impl=impl, decay_to=to_mx(target), **options)
    assert_close(y, y_ref, RTOL_F32, "y")
    assert_states_close(state, s_ref, RTOL_F32)


def splits(length, rng):
    cuts = [sorted(rng.sample(range(1, length), rng.randint(1, 5))) for _ in range(2)]
    return [*cuts, list(range(1, length))]


@pytest.mark.parametrize("rule", ["momentum", "omega-muon"])
@pytest.mark.parametrize("memory_id", ["mlp", "gated-res"])
def test_pieces_equal_one_call(memory_id, rule):
    rng = random.Random(memory_id + rule)
    window, muon = RULES[rule]
    memory, inputs, weights, momentum = case(memory_id, 13, window)
    memory_mx, options = mirror_memory(memory), {"omega_window": window, "muon": muon}
    options["chunk_size"] = 4
    start = mlx_state(memory_mx, weights, momentum, 2)
    y_full, s_full = mlx_scan(memory_mx, inputs, start, impl="chunk", **options)
    for cuts in splits(13, rng):
        state, pieces = start, []
        for lo, hi in zip([0, *cuts], [*cuts, 13]):
            piece = {n: None if x is None else x[:, lo:hi] for n, x in inputs.items()}
            impl = rng.choice(["chunk", "reference", "auto"])
            y, state = mlx_scan(memory_mx, piece, state, impl=impl, **options)
            pieces.append(y)
        assert_close(mx.concatenate(pieces, axis=1), y_full, 1e-5, f"y, cuts={cuts}")
        assert_states_close(state, s_full, 1e-5)


def test_empty_call_leaves_the_state_unchanged():
    memory, inputs, weights, momentum = case("mlp", 0)
    memory_mx = mirror_memory(memory)
    start = mlx_state(memory_mx, weights, momentum, 2)
    y, state = mlx_scan(memory_mx, inputs, start, chunk_size=3)
    assert y.shape == (2, 0, 2, 3) and state is start


@pytest.mark.parametrize("degree", [1, 2, 3])
def test_polynomial_features_match_torch(degree):
    x = torch.randn(2, 3, 5)
    coefficients = torch.rand(degree + 1)
    expected = polynomial_features(x, degree, coefficients)
    actual = mops.polynomial_features(to_mx(x), degree, to_mx(coefficients))
    assert actual.shape[-1] == mops.polynomial_width(5, degree)
    assert_close(actual, expected, RTOL_F32, "phi")
    assert_close(mops.polynomial_features(to_mx(x), degree), polynomial_features(x, degree), 1e-6)


@pytest.mark.parametrize("shape", [(3, 4, 9), (2, 9, 4), (5, 5), (2, 2, 3, 6)])
def test_newton_schulz_matches_torch(shape):
    x = torch.randn(*shape)
    expected = newton_schulz5_reference(x)
    assert_close(mops.newton_schulz5_reference(to_mx(x)), expected, RTOL_F32, "reference")
    assert_close(mops.newton_schulz5(to_mx(x)), expected, RTOL_F32, "compiled")
    zero = mops.newton_schulz5(mx.zeros((2, 3)))
    assert np.array_equal(np.array(zero), np.zeros((2, 3)))


def test_newton_schulz_of_bfloat16_iterates_in_float32_as_torch():
    """bf16 in, bf16 out, fp32 inside: equal to torch's up to one bf16 rounding of the
    result (a bf16 iteration differs by far more: five steps amplify its rounding)."""
    x = torch.randn(3, 4, 6).to(torch.bfloat16)
    expected = newton_schulz5_reference(x).float()
    for ns5 in (mops.newton_schulz5_reference, mops.newton_schulz5):
        actual = ns5(to_mx(x.float()).astype(mx.bfloat16))
        assert actual.dtype == mx.bfloat16
        assert_close(actual.astype(mx.float32), expected, 1e-2, ns5.__name__)


def test_unbind_gradient_equals_slicing_gradient():
    x = mx.random.normal((2, 3, 5, 4))
    weights = mx.random.normal((5, 2, 3, 4))

    def through_unbind(x):
        return sum((w * p).sum() for w, p in zip(weights, unbind(x, 2)))

    def through_slices(x):
        return sum((weights[n] * x[:, :, n]).sum() for n in range(5))

    assert_close(mx.grad(through_unbind)(x), mx.grad(through_slices)(x), 1e-6, "grad")


def probe(shape_source, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape_source.shape, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("rule", ["momentum", "omega", "omega-muon", "muon-chunk"])
@pytest.mark.parametrize("memory_id", ["linear", "mlp3-silu-res", "gated"])
def test_gradients_match_torch_autograd(memory_id, rule):
    """mx.grad of a random functional of outputs, final weights and momentum with respect to
    every input, the initial weights and the initial momentum equals torch autograd (float64)."""
    window, muon = RULES[rule]
    memory, inputs, weights, momentum = case(memory_id, 10, window, torch.float64)
    options = {"chunk_size": 4, "omega_window": window, "muon": muon, "read": "after"}
    names = [n for n in INPUT_NAMES if inputs[n] is not None]
    leaves = [inputs[n] for n in names] + list(weights.values()) + list(momentum.values())
    for leaf in leaves:
        leaf.requires_grad_(True)
    y, state = torch_scan(memory, inputs, weights, momentum, grad=True, **options)
    probes = [probe(y, 1)] + [probe(state.weights[n], 2 + i) for i, n in enumerate(weights)]
    probes += [probe(state.momentum[n], 9 + i) for i, n in enumerate(weights)]
    outputs = [y, *(state.weights[n] for n in weights), *(state.momentum[n] for n in weights)]
    loss = sum((p * o).sum() for p, o in zip(probes, outputs))
    expected = torch.autograd.grad(loss, leaves, allow_unused=True)

    memory_mx, count = mirror_memory(memory), len(names)
    mx_probes = [to_mx(p) for p in probes]

    def mlx_loss(*arrays):
        given = dict(zip(names, arrays[:count]))
        start = memory_mx.initial_state(dict(zip(weights, arrays[count : count + len(weights)])), 2)
        start.momentum = dict(zip(weights, arrays[count + len(weights) :]))
        args = {n: given[n] for n in INPUT_NAMES if n != "omega_gate"}
        y, state = mops.memory_scan(
            memory_mx, state=start, omega_gate=given.get("omega_gate"), **args, **options
        )
        outputs = [y, *(state.weights[n] for n in weights)]
        outputs += [state.momentum[n] for n in weights]
        return sum((p * o).sum() for p, o in zip(mx_probes, outputs))

    arrays = [to_mx(leaf) for leaf in leaves]
    actual = mx.grad(mlx_loss, argnums=list(range(len(arrays))))(*arrays)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == mx.float64
        assert_close(a, torch.zeros_like(leaves[i]) if e is None else e, RTOL_F64, f"grad {i}")


@pytest.mark.parametrize(
    ("change", "argument"),
    [
        ({"q": lambda x: x[..., :-1]}, "k must have"),
        ({"lr": lambda x: -x}, "lr must lie"),
        ({"momentum": lambda x: x + 2}, "momentum must lie"),
        ({"decay": lambda x: x[:, :-1]}, "decay must have shape"),
        ({"q": lambda x: x * float("nan")}, "q contains NaN"),
    ],
)
def test_bad_input_is_a_value_error_naming_the_argument(change, argument):
    memory, inputs, weights, momentum = case("mlp", 5)
    memory_mx = mirror_memory(memory)
    ((name, edit),) = change.items()
    inputs = {**inputs, name: edit(inputs[name])}
    with pytest.raises(ValueError, match=argument):
        mlx_scan(memory_mx, inputs, mlx_state(memory_mx, weights, momentum, 2), chunk_size=3)


def test_bad_options_are_value_errors():
    memory, inputs, weights, momentum = case("mlp", 5)
    memory_mx = mirror_memory(memory)
    start = mlx_state(memory_mx, weights, momentum, 2)
    for options, message in [
        ({"chunk_size": 0}, "chunk_size"),
        ({"omega_window": 2}, "omega_gate"),
        ({"read": "sideways"}, "read"),
        ({"impl": "fast"}, "impl"),
        ({"muon": "sometimes"}, "muon"),
    ]:
        with pytest.raises(ValueError, match=message):
            mlx_scan(memory_mx, inputs, start, **options)
    _, state = mlx_scan(memory_mx, inputs, start, chunk_size=3)
    with pytest.raises(ValueError, match="chunk_size"):
        mlx_scan(memory_mx, inputs, state, chunk_size=4)
    with pytest.raises(ValueError, match="residual"):
        mops.MLPMemory(dim_in=4, dim_out=3, residual=True)


@pytest.mark.parametrize("depth", [2, 3])
def test_a_zero_output_init_zeroes_only_the_last_weight(depth):
    """The mirror draws through the shared spec: ``output_init="zero"`` zeroes ``w{depth}``
    (``down`` for the gated memory) and leaves every other weight as LeCun's rule draws it."""
    key = mx.random.key(0)
    for memory, last in (
        (mops.MLPMemory(16, 16, depth=depth, output_init="zero"), f"w{depth}"),
        (mops.GatedMLPMemory(16, 16, output_init="zero"), "down"),
    ):
        weights = memory.init_weights(2, key=key)
        for name, w in weights.items():
            assert (float(mx.abs(w).max()) == 0.0) == (name == last), name
        # a number scales the same draw: half LeCun's last weight, the others unchanged
        lecun = type(memory)(16, 16, **({"depth": depth} if last != "down" else {}))
        half = type(memory)(16, 16, output_init=0.5, **({"depth": depth} if last != "down" else {}))
        drawn, halved = lecun.init_weights(2, key=key), half.init_weights(2, key=key)
        for name in drawn:
            want = drawn[name] * (0.5 if name == last else 1.0)
            assert float(mx.abs(halved[name] - want).max()) == 0.0, name
