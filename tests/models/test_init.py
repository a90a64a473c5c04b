"""Initialisation: every module initialises its own parameters (``init_weights``), so a model
built on the meta device and materialised with ``to_empty`` + ``init_weights`` is the model a
normal build gives; projections into the residual stream start at std / sqrt(2 depth)."""

from __future__ import annotations

import math

import pytest
import torch

import titans_atlas as ta

TINY = {"vocab_size": 50, "dim": 16, "depth": 2, "num_heads": 2, "window": 4, "chunk_size": 3}


def logits_of(model: ta.LanguageModel) -> torch.Tensor:
    ids = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model(ids)[0]


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("name", ta.list_models())
def test_meta_build_materialised_equals_a_normal_build(name, tie):
    normal = ta.create_model(name, **TINY, tie_embeddings=tie)
    torch.manual_seed(5)
    normal.init_weights()
    with torch.device("meta"):
        meta = ta.create_model(name, **TINY, tie_embeddings=tie)
    assert all(p.is_meta for p in meta.parameters())
    meta.to_empty(device="cpu")
    torch.manual_seed(5)
    meta.init_weights()
    expected, actual = normal.state_dict(), meta.state_dict()
    assert expected.keys() == actual.keys()
    differ = [k for k in expected if not torch.equal(expected[k], actual[k])]
    assert not differ, f"{name}: materialised model differs from a normal build in {differ}"
    assert (meta.head.weight is meta.embed.weight) == tie
    assert torch.equal(logits_of(meta), logits_of(normal))


@pytest.mark.parametrize("name", ta.list_models())
def test_init_weights_reaches_every_parameter(name):
    model = ta.create_model(name, **TINY, tie_embeddings=False)
    with torch.no_grad():
        for param in model.parameters():
            param.fill_(float("nan"))
    model.init_weights()
    untouched = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    assert not untouched, f"{name}: init_weights left {untouched}"


OUTPUT_PROJECTIONS = ("attn.to_out.weight", "memory.to_out.weight", "ffn.down.weight")


@pytest.mark.parametrize("name", ["mag", "mac", "swa"])
def test_residual_output_projections_start_at_std_over_sqrt_two_depth(name):
    depth = 8
    torch.manual_seed(0)
    model = ta.create_model(name, vocab_size=64, dim=128, depth=depth, num_heads=4, window=8)
    scaled, plain = [], []
    for pname, param in model.named_parameters():
        if pname.startswith("blocks.") and pname.endswith(OUTPUT_PROJECTIONS):
            scaled.append(param.std().item())
        elif pname.endswith(("to_qkv.weight", "ffn.gate.weight", "ffn.up.weight")):
            plain.append(param.std().item())
    assert len(scaled) >= 2 * depth and plain
    out_std = 0.02 / math.sqrt(2 * depth)
    assert all(abs(s / out_std - 1) < 0.05 for s in scaled), (scaled, out_std)
    assert all(abs(s / 0.02 - 1) < 0.05 for s in plain), plain
    assert abs(model.embed.weight.std().item() / 0.02 - 1) < 0.05


def test_a_standalone_memory_layer_is_initialised():
    """Layers are public: built alone they initialise themselves, like torch.nn.Linear."""
    torch.manual_seed(0)
    layer = ta.NeuralMemory(16, 2, ta.MemoryConfig(chunk_size=4))
    assert all(torch.isfinite(p).all() for p in layer.parameters())
    gates = layer._gates(torch.zeros(1, 1, 16))[:3]  # x = 0: the biases alone
    lr, momentum, decay = (g.mean().item() for g in gates)
    assert math.isclose(lr, layer.config.init_lr, rel_tol=1e-5)
    assert math.isclose(momentum, layer.config.init_momentum, rel_tol=1e-5)
    assert math.isclose(decay, layer.config.init_decay, rel_tol=1e-5)


@pytest.mark.parametrize("head_dim", [8, 32])
def test_projected_polynomial_keys_start_at_the_unit_norm_of_plain_keys(head_dim):
    """The projection back from phi starts as the identity on phi's degree-1 block (plus
    small noise): projected keys keep the norm of the L2-normalised keys they came from
    instead of ~0.16 (noise alone), which wrote ~40x more weakly than the plain layer."""
    torch.manual_seed(0)
    config = ta.MemoryConfig(feature_map="polynomial", feature_projection=True, residual=True)
    layer = ta.NeuralMemory(2 * head_dim, 2, config)
    weight = layer.feature_projection.weight
    noise = weight.clone()
    noise[:, 1 : 1 + head_dim] -= torch.eye(head_dim)
    assert noise.std().item() == pytest.approx(0.02, rel=0.1)  # the rest is the init noise
    keys = layer._features(torch.randn(4, 64, 2 * head_dim))  # [B, T, H, Dh]
    norms = keys.norm(dim=-1)
    assert norms.min() > 0.8 and norms.max() < 1.3, (norms.min(), norms.max())
