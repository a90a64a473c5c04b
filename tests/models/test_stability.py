"""The memory layer is stable by design (docs/memory.md, section 9; issue 10): untrained
models stream long inputs; the gates stay inside their bounds whatever the parameters; a
layer pushed the way an outer optimiser can push it (values x 64, every gate at its limit)
stays finite where the unbounded layer of format-2 checkpoints blows up; decay toward the
initial weights keeps the streaming properties and trains its target."""

import pytest
import torch

import titans_atlas as ta
from titans_atlas.layers import MemoryLayerState
from titans_atlas.layers.memory_config import UNBOUNDED_GATES
from titans_atlas.ops import validating


def memory_layers(model):
    return [m for m in model.modules() if isinstance(m, ta.NeuralMemory)]


@pytest.mark.parametrize("name", ["lmm", "mac", "mag", "mal", "omeganet"])
def test_untrained_model_streams_1k_tokens_at_chunk_64(name):
    ids = torch.randint(0, 256, (1, 1024), generator=torch.Generator().manual_seed(256))
    torch.manual_seed(0)
    model = ta.create_model(
        name, vocab_size=256, dim=128, depth=2, num_heads=2, window=128, chunk_size=64
    ).eval()
    with torch.no_grad():
        logits, state = model(ids)
    assert torch.isfinite(logits).all()
    block = state.blocks[-1]
    layer = block if isinstance(block, MemoryLayerState) else block.memory
    assert all(torch.isfinite(w).all() for w in layer.memory.weights.values())


def test_gates_stay_inside_their_bounds_for_any_parameters():
    config = ta.MemoryConfig(chunk_size=4, omega_window=2, lr_max=0.03, momentum_max=0.8)
    layer = ta.NeuralMemory(16, 2, config)
    x = torch.randn(2, 5, 16)
    for bias in (-60.0, 0.0, 60.0):
        with torch.no_grad():
            layer.to_gates.bias.fill_(bias)
            layer.to_gates.weight.mul_(100.0)
            lr, momentum, decay, omega = layer._gates(x)
        assert lr.min() >= 0 and lr.max() <= 0.03
        assert momentum.min() >= 0 and momentum.max() <= 0.8
        assert config.decay_min <= decay.min() and decay.max() <= 1
        assert omega.min() >= 0 and omega.max() <= 1


def pushed(name, **config):
    """An untrained model pushed as training can push it: value projections x 64, every gate
    bias at +/-8 logits (theta -> lr_max, eta -> its maximum, alpha -> its minimum)."""
    torch.manual_seed(0)
    model = ta.create_model(
        name, vocab_size=256, dim=64, depth=2, num_heads=2, window=16, chunk_size=16, **config
    ).eval()
    with torch.no_grad():
        for layer in memory_layers(model):
            width = layer.head_dim * layer.num_heads
            layer.to_qkv.weight[2 * width :] *= 64.0  # the value rows
            heads = layer.num_heads
            layer.to_gates.bias[: 2 * heads] = 8.0  # theta, eta at their top
            layer.to_gates.bias[2 * heads : 3 * heads] = -8.0  # alpha at its floor
    return model


def final_weight_norm(model, ids):
    with torch.no_grad(), validating(False):  # a blown-up layer hands NaN to the next one
        logits, state = model(ids)
    layers = [b if isinstance(b, MemoryLayerState) else b.memory for b in state.blocks]
    norms = [w.norm().item() for layer in layers for w in layer.memory.weights.values()]
    return logits, max(norms)


# omeganet: its preset bounds the inner step at 1, not the layer's 0.1
@pytest.mark.parametrize("name", ["lmm", "mag", "omeganet"])
def test_a_pushed_layer_stays_finite_where_the_unbounded_one_blows_up(name):
    ids = torch.randint(0, 256, (2, 512), generator=torch.Generator().manual_seed(3))
    logits, norm = final_weight_norm(pushed(name), ids)
    assert torch.isfinite(logits).all() and norm < 1e3
    logits, norm = final_weight_norm(pushed(name, **UNBOUNDED_GATES), ids)
    assert not norm < 1e30  # inf or NaN: the layer before the clip and bounds


def test_decay_to_the_initial_weights_streams_and_trains_its_target():
    """Any split of a stream equals one call, and the initial weights get the anchor's
    gradient too (they differ from the gradients with decay toward zero)."""
    torch.manual_seed(0)
    kwargs = dict(vocab_size=64, dim=32, depth=2, num_heads=2, window=8, chunk_size=4)
    anchored = ta.create_model("mag", decay_target="init", **kwargs).double()
    torch.manual_seed(0)
    plain = ta.create_model("mag", **kwargs).double()
    ids = torch.randint(0, 64, (2, 23), generator=torch.Generator().manual_seed(1))
    full, _ = anchored(ids)
    state, pieces = None, []
    for lo, hi in ((0, 5), (5, 6), (6, 23)):
        logits, state = anchored(ids[:, lo:hi], state)
        pieces.append(logits)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-10, atol=1e-10)
    grads = []
    for model in (anchored, plain):
        logits, _ = model(ids)
        weights = memory_layers(model)[0].initial_weights["w1"]
        (grad,) = torch.autograd.grad(logits.square().mean(), weights)
        grads.append(grad)
    assert torch.isfinite(grads[0]).all() and not torch.allclose(grads[0], grads[1])
