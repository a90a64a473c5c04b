"""The functional memory models: analytic inner gradients equal autograd, shapes, init."""

import pytest
import torch
import torch.nn.functional as F

from helpers import MEMORIES, assert_close, random_weights
from titans_atlas.ops import GatedMLPMemory, LinearMemory, MLPMemory, memory_scan


@pytest.mark.parametrize("memory_id", list(MEMORIES))
def test_grad_factors_equal_autograd(memory_id):
    memory = MEMORIES[memory_id]
    weights = {n: w.expand(3, *w.shape).clone() for n, w in random_weights(memory, 2).items()}
    k = torch.randn(3, 2, 6, memory.dim_in, dtype=torch.float64)
    v = torch.randn(3, 2, 6, memory.dim_out, dtype=torch.float64)
    factors = memory.grad_factors(weights, k, v)
    for token in range(6):
        leaves = {n: w.detach().requires_grad_() for n, w in weights.items()}
        pred = memory.forward(leaves, k[:, :, token : token + 1])
        loss = 0.5 * ((pred - v[:, :, token : token + 1]) ** 2).sum()
        expected = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values()))))
        assert set(factors) == set(expected)
        for name, (a, b) in factors.items():
            outer = a[:, :, token, :, None] * b[:, :, token, None, :]
            assert_close(outer, expected[name], name=f"{memory_id}:{name}")


@pytest.mark.parametrize("memory_id", list(MEMORIES))
def test_forward_shapes_and_batched_weights(memory_id):
    memory = MEMORIES[memory_id]
    weights = memory.init_weights(num_heads=2)
    for name, w in weights.items():
        assert w.shape == (2, *memory.weight_shapes()[name])
    x = torch.randn(4, 2, 7, memory.dim_in)
    assert memory.forward(weights, x).shape == (4, 2, 7, memory.dim_out)
    state = memory.initial_state(weights, batch_size=4)
    for name, w in state.weights.items():
        assert w.shape == (4, 2, *memory.weight_shapes()[name])
        assert torch.equal(state.momentum[name], torch.zeros_like(w))
    assert torch.allclose(memory.forward(state.weights, x), memory.forward(weights, x))


@pytest.mark.parametrize("memory_id", list(MEMORIES))
def test_forward_refuses_the_wrong_width(memory_id):
    memory = MEMORIES[memory_id]
    weights = memory.init_weights(num_heads=2)
    with pytest.raises(ValueError, match=rf"x must be \[B, H, N, {memory.dim_in}\]"):
        memory.forward(weights, torch.randn(4, 2, 7, memory.dim_in + 1))


def test_forward_names_bad_weights():
    memory = MEMORIES["mlp"]
    weights = memory.init_weights(num_heads=2)
    x = torch.randn(1, 2, 3, memory.dim_in)
    cases = [
        ({"w1": weights["w1"]}, r"keys \['w1', 'w2'\]"),  # was KeyError: 'w2'
        ({**weights, "w2": weights["w2"][:, :3]}, r"weights\['w2'\] must be \[H, 10, 3\]"),
        # per-stream weights for 3 streams x 1 head were broadcast against x's 1 x 2
        ({n: w[:1].expand(3, 1, *w.shape[1:]) for n, w in weights.items()}, r"lead with \[1, 2\]"),
    ]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            memory.forward(bad, x)
    as_parameters = torch.nn.ParameterDict(weights)  # a layer's initial weights
    assert torch.equal(memory.forward(as_parameters, x), memory.forward(weights, x))


def test_initialisation_scales():
    linear = LinearMemory(64, 32).init_weights(4)
    assert torch.count_nonzero(linear["w1"]) == 0  # an empty associative memory
    seeded = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    mlp = MLPMemory(256, 256, expansion=4).init_weights(4, generator=seeded())
    assert abs(mlp["w1"].std().item() - 1 / 16) < 2e-3  # LeCun: 1 / sqrt(fan_in)
    assert abs(mlp["w2"].std().item() - 1 / 32) < 1e-3
    same = MLPMemory(256, 256).init_weights(4, generator=seeded())
    assert torch.equal(same["w1"], mlp["w1"])
    gated = GatedMLPMemory(256, 256, expansion=4).init_weights(4, generator=seeded())
    for name in ("gate", "up"):  # fan_in^-1/4: unit-norm keys, hidden units the MLP's size
        assert abs(gated[name].std().item() - 1 / 4) < 1e-2
    assert abs(gated["down"].std().item() - 1 / 32) < 1e-3


def test_a_write_moves_the_gated_read_as_far_as_the_mlp_read():
    """Per-token Muon fixes how far the weights move; what reaches the read is the hidden
    units' size. With LeCun's gate and up, the gated memory's read moved 4.5x less than the
    MLP's for the same writes of unit-norm keys; the gated init brings it level."""
    torch.manual_seed(0)
    dim, heads, batch, pairs = 32, 2, 64, 4
    keys = F.normalize(torch.randn(batch, pairs, heads, dim, dtype=torch.float64), dim=-1)
    values = F.normalize(torch.randn(batch, pairs, heads, dim, dtype=torch.float64), dim=-1)
    gate = lambda x: torch.full((batch, pairs, heads), x, dtype=torch.float64)  # noqa: E731
    moved = {}
    for memory in (MLPMemory(dim, dim, residual=True), GatedMLPMemory(dim, dim, residual=True)):
        state = memory.initial_state(memory.init_weights(heads, dtype=torch.float64), batch)
        _, after = memory_scan(
            memory, keys, keys, values, gate(0.1), gate(0.0), gate(0.0), state,
            chunk_size=1, update_rule="muon",
        )  # fmt: skip
        x = keys.transpose(1, 2)
        change = memory.forward(after.weights, x) - memory.forward(state.weights, x)
        moved[type(memory).__name__] = change.norm(dim=-1).mean().item()
    assert 0.5 < moved["GatedMLPMemory"] / moved["MLPMemory"] < 2.0, moved


def test_residual_memory_reads_identity_plus_mlp():
    memory = GatedMLPMemory(8, 8, residual=True)
    weights = {n: torch.zeros_like(w) for n, w in memory.init_weights(2).items()}
    x = torch.randn(1, 2, 3, 8)
    assert torch.equal(memory.forward(weights, x), x)


@pytest.mark.parametrize("residual", [False, True])
def test_a_zero_output_init_starts_an_mlp_memory_empty(residual):
    """``output_init="zero"``: the last weight starts at zero, so the untrained read is 0 (or
    the key, residual), as the linear memory's; the other weights are drawn as before."""
    seeded = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    x = F.normalize(torch.randn(2, 3, 5, 16), dim=-1)
    for make in (MLPMemory, GatedMLPMemory):
        default = make(16, 16, residual=residual).init_weights(3, generator=seeded())
        memory = make(16, 16, residual=residual, output_init="zero")
        weights = memory.init_weights(3, generator=seeded())
        last = list(memory.weight_shapes())[-1]
        assert torch.count_nonzero(weights[last]) == 0
        for name in weights.keys() - {last}:
            assert torch.equal(weights[name], default[name])
        assert torch.equal(memory.forward(weights, x), x if residual else torch.zeros_like(x))
        assert memory.forward(default, x).norm(dim=-1).mean() > 0.1  # LeCun's: a random read


def test_a_zero_output_init_makes_a_first_write_what_the_memory_reads():
    """After one write per key, the zero-started MLP reads back mostly what was written; the
    LeCun-started one reads its random initial function of the key on top (research/LOG.md,
    section 16)."""
    torch.manual_seed(0)
    dim, batch, pairs = 64, 32, 4
    keys = F.normalize(torch.randn(batch, pairs, 1, dim, dtype=torch.float64), dim=-1)
    values = F.normalize(torch.randn(batch, pairs, 1, dim, dtype=torch.float64), dim=-1)
    gate = lambda x: torch.full((batch, pairs, 1), x, dtype=torch.float64)  # noqa: E731
    cosine = {}
    for output_init in ("lecun", "zero"):
        memory = MLPMemory(dim, dim, output_init=output_init)
        state = memory.initial_state(memory.init_weights(1, dtype=torch.float64), batch)
        _, after = memory_scan(
            memory, keys, keys, values, gate(0.1), gate(0.0), gate(0.0), state, chunk_size=1
        )
        read = memory.forward(after.weights, keys.transpose(1, 2))
        cosine[output_init] = F.cosine_similarity(read, values.transpose(1, 2), dim=-1).mean()
    assert cosine["zero"] > 0.8 > 0.5 > cosine["lecun"], cosine


def test_output_init_is_checked():
    for make in (MLPMemory, GatedMLPMemory):
        for bad in ("small", -0.5, float("nan"), float("inf"), True, None):
            with pytest.raises(ValueError, match="output_init"):
                make(8, 8, output_init=bad)


def test_output_init_scales_only_the_last_weight_by_its_number():
    """A number s draws the last weight at s x LeCun's std from the same noise (1 is LeCun's
    draw bit for bit, the names stand for 1 and 0); the other weights are unchanged."""
    seeded = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    for make in (MLPMemory, GatedMLPMemory):
        # LeCun's draw written out here, not through the code under test: N(0, 1) noise in
        # weight order, times fan_in^-1/2 (the gated memory's gate and up: fan_in^-1/4)
        generator, default = seeded(), {}
        for name, (d_in, d_out) in make(16, 16).weight_shapes().items():
            power = 0.25 if name in ("gate", "up") else 0.5
            noise = torch.randn(2, d_in, d_out, generator=generator)
            default[name] = noise * d_in**-power
        assert (
            make(16, 16).output_init == 1.0 and make(16, 16, output_init="lecun").output_init == 1.0
        )
        assert make(16, 16, output_init="zero").output_init == 0.0
        for scale in (1, 0.5, 2.0):
            memory = make(16, 16, output_init=scale)
            weights = memory.init_weights(2, generator=seeded())
            last = list(memory.weight_shapes())[-1]
            for name in weights:
                want = default[name] * scale if name == last else default[name]
                torch.testing.assert_close(weights[name], want, rtol=0, atol=0)


@pytest.mark.parametrize("impl", ["chunk", "reference", "token"])
@pytest.mark.parametrize("muon", [False, True])
@pytest.mark.parametrize(
    "memory",
    [MLPMemory(dim_in=4, dim_out=4, depth=3), GatedMLPMemory(dim_in=4, dim_out=4)],
    ids=["mlp-depth3", "gated"],
)
def test_the_final_state_keeps_the_initial_weights_order(memory, muon, impl):
    """state.weights and state.momentum list their weights as init_weights does (w1 first),
    whichever impl and rule computed them: a caller zipping or listing them gets the same
    order back (the backward pass computes the last weight's factors first)."""
    torch.manual_seed(0)
    weights = memory.init_weights(num_heads=2)
    state = memory.initial_state(weights, batch_size=1)
    x, gate = torch.randn(1, 5, 2, 4), torch.rand(1, 5, 2) * 0.3
    _, final = memory_scan(
        memory, x, x, x, gate, gate, gate, state=state, chunk_size=2, impl=impl, muon=muon
    )
    assert list(final.weights) == list(final.momentum) == list(weights)
