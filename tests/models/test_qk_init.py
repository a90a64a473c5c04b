"""The memory layer's initialisation (docs/architectures.md, "Initialisation") and the
``gdn`` configuration (models/deltanet.py).

"shifted" (the default) starts the query projection equal to the key projection and the
short convolutions as delays (keys from the previous token, queries and values from the
current one), so the untrained memory stores "previous token -> this token" and a query
addresses the key written right after its token; "matched" keeps the copy with random
non-negative taps and no bias, so queries address their own token's key and different
tokens have different keys. The tests fail under "independent", the init the layer had
before (checked in each test)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import titans_atlas as ta
from titans_atlas.layers.memory_config import MemoryConfig
from titans_atlas.layers.neural_memory import NeuralMemory
from titans_atlas.ops import LinearMemory, memory_scan

DIM, HEADS = 64, 2


def layer(qk_init: str = "matched", seed: int = 0, **memory) -> NeuralMemory:
    torch.manual_seed(seed)
    return NeuralMemory(DIM, HEADS, MemoryConfig(qk_init=qk_init, **memory))


def features(module: NeuralMemory, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The untrained layer's query and key features ``[B, T, H, Dh]``, through its own
    projection, convolutions and feature map."""
    q, k, _ = module.to_qkv(x).split(DIM, dim=-1)
    q, _ = module._query_features(q, None)
    k, _ = module.conv["k"](k, None)
    return q, module._features(k)


def tokens(seed: int = 1, length: int = 48) -> torch.Tensor:
    """Normed model inputs, as the block's RMSNorm gives them: [1, T, D]."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(1, length, DIM, generator=generator)


def test_matched_init_ties_the_query_rows_and_drops_the_conv_bias():
    module = layer()
    rows = module.to_qkv.weight
    assert torch.equal(rows[:DIM], rows[DIM : 2 * DIM])
    assert not torch.equal(rows[DIM : 2 * DIM], rows[2 * DIM :])  # values stay independent
    for conv in module.conv.values():
        assert (conv.conv.weight >= 0).all() and (conv.conv.bias == 0).all()
        assert conv.conv.weight.abs().sum() > 0


def test_shifted_init_is_the_default_and_starts_the_convolutions_as_delays():
    assert MemoryConfig().qk_init == "shifted"
    module = layer("shifted")
    rows = module.to_qkv.weight
    assert torch.equal(rows[:DIM], rows[DIM : 2 * DIM])
    current, previous = torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0])  # taps [t-1, t]
    for name, taps in (("q", current), ("k", previous), ("v", current)):
        conv = module.conv[name].conv
        assert torch.equal(conv.weight[:, 0], taps.expand(DIM, 2)) and (conv.bias == 0).all()
    one_tap = NeuralMemory(DIM, HEADS, MemoryConfig(conv_kernel=1)).conv["k"].conv
    assert (one_tap.weight == 1).all()  # no earlier token to delay to: the current one


def test_an_untrained_shifted_query_addresses_the_key_written_after_its_token():
    """q_t equals k_{t+1}: the key written where token t's successor is the value, which is
    how a key -> value pair is read back later."""
    q, k = features(layer("shifted"), tokens())
    torch.testing.assert_close(q[:, :-1], k[:, 1:])
    _, k_matched = features(layer("matched"), tokens())
    assert not torch.allclose(q[:, :-1], k_matched[:, 1:], atol=0.1)


def test_independent_init_is_the_earlier_draw():
    module = layer("independent")
    rows = module.to_qkv.weight
    assert not torch.equal(rows[:DIM], rows[DIM : 2 * DIM])
    assert any((conv.conv.bias != 0).any() for conv in module.conv.values())


@pytest.mark.parametrize("qk_init", ["matched", "independent"])
def test_an_untrained_query_addresses_its_own_key_only_when_matched(qk_init):
    q, k = features(layer(qk_init), tokens())
    own = (q * k).sum(-1)  # [B, T, H]: cosine, both are unit vectors
    other = torch.einsum("bthd,bshd->bhts", q, k)
    off_diagonal = other[:, :, ~torch.eye(q.shape[1], dtype=torch.bool)]
    if qk_init == "matched":
        # the conv taps are drawn separately for q and k, so not 1 (0.76 here, 0.02 off it)
        assert own.mean() > off_diagonal.mean() + 0.5
    else:  # the failure this init removes: q and k unrelated at the start
        assert own.mean() < off_diagonal.mean() + 0.2


@pytest.mark.parametrize("qk_init", ["matched", "independent"])
def test_different_tokens_start_with_different_keys_only_when_matched(qk_init):
    _, k = features(layer(qk_init), tokens())
    cosine = torch.einsum("bthd,bshd->bhts", k, k)
    off_diagonal = cosine[:, :, ~torch.eye(k.shape[1], dtype=torch.bool)].mean().item()
    if qk_init == "matched":
        assert off_diagonal < 0.6
    else:  # the conv bias dominates: every key nearly the same vector
        assert off_diagonal > 0.9


def test_qk_init_is_validated_and_saved_configs_without_it_load(tmp_path):
    with pytest.raises(ValueError, match="qk_init"):
        MemoryConfig(qk_init="tied")
    model = ta.create_model("lmm", vocab_size=32, dim=32, depth=1, num_heads=2)
    model.save_pretrained(str(tmp_path))
    config = (tmp_path / "config.json").read_text()
    assert '"qk_init": "shifted"' in config
    (tmp_path / "config.json").write_text(config.replace('"qk_init": "shifted",', ""))
    loaded = ta.load_model(str(tmp_path))
    assert loaded.config.memory.qk_init == "shifted"
    ids = torch.randint(0, 32, (1, 9))
    torch.testing.assert_close(loaded(ids)[0], model.eval()(ids)[0])


def test_no_momentum_needs_a_zero_initial_momentum():
    with pytest.raises(ValueError, match="init_momentum must be 0"):
        MemoryConfig(momentum_max=0.0, init_momentum=0.5)
    config = MemoryConfig(momentum_max=0.0, init_momentum=0.0)
    assert config.gate_biases()[1] == 0.0


def test_gdn_is_the_gated_delta_rule():
    """The registered ``gdn`` memory is the gated delta rule (beta = theta / a, the write
    scaled by the keep a): its scan equals that recurrence written out, in float64."""
    memory = ta.model_config("gdn").memory
    assert (memory.model, memory.momentum_max, memory.max_grad_norm) == ("linear", 0.0, None)
    assert memory.chunk_size == 1 and memory.lr_max == 1.0
    generator = torch.Generator().manual_seed(0)
    B, T, H, D = 2, 7, 2, 4
    k = F.normalize(torch.randn(B, T, H, D, generator=generator, dtype=torch.float64), dim=-1)
    q = F.normalize(torch.randn(B, T, H, D, generator=generator, dtype=torch.float64), dim=-1)
    v = torch.randn(B, T, H, D, generator=generator, dtype=torch.float64)
    theta = torch.rand(B, T, H, generator=generator, dtype=torch.float64)
    alpha = 0.2 * torch.rand(B, T, H, generator=generator, dtype=torch.float64)
    model = LinearMemory(D, D)
    weights = {"w1": torch.zeros(H, D, D, dtype=torch.float64)}
    reads, state = memory_scan(
        model, q, k, v, theta, torch.zeros_like(theta), alpha,
        model.initial_state(weights, B), chunk_size=1,
    )  # fmt: skip
    W = torch.zeros(B, H, D, D, dtype=torch.float64)  # [B, H, Dk, Dv], f(W, k) = k W
    identity = torch.eye(D, dtype=torch.float64)
    for t in range(T):
        a = (1 - alpha[:, t])[..., None, None]  # the keep
        beta = theta[:, t][..., None, None] / a
        kt, vt = k[:, t, :, :, None], v[:, t, :, None, :]  # [B, H, Dk, 1], [B, H, 1, Dv]
        W = a * (identity - beta * kt @ kt.transpose(-1, -2)) @ W + a * beta * kt @ vt
        read = (q[:, t, :, None, :] @ W)[..., 0, :]
        torch.testing.assert_close(reads[:, t], read)
    torch.testing.assert_close(state.weights["w1"], W)


def test_a_full_delta_step_overwrites_the_key():
    """theta = 1, no decay: the memory returns exactly the last value written at a unit key,
    whatever it held before (beta up to 1 is the point of gdn's lr_max)."""
    generator = torch.Generator().manual_seed(1)
    k = F.normalize(torch.randn(1, 3, 1, 4, generator=generator, dtype=torch.float64), dim=-1)
    k[:, 2] = k[:, 0]
    v = torch.randn(1, 3, 1, 4, generator=generator, dtype=torch.float64)
    model = LinearMemory(4, 4)
    ones = torch.ones(1, 3, 1, dtype=torch.float64)
    weights = {"w1": torch.zeros(1, 4, 4, dtype=torch.float64)}
    reads, _ = memory_scan(
        model, k, k, v, ones, 0 * ones, 0 * ones, model.initial_state(weights, 1), chunk_size=1
    )
    torch.testing.assert_close(reads[:, 2], v[:, 2])


def test_output_init_is_validated_and_saved_configs_without_it_load(tmp_path):
    with pytest.raises(ValueError, match="output_init"):
        MemoryConfig(output_init="zeros")
    with pytest.raises(ValueError, match="output_init"):
        ta.create_model("lmm", vocab_size=32, dim=32, depth=1, num_heads=2, output_init=-1)
    for bad in (True, None, float("nan"), float("inf"), -1e-9, 10**400, "half"):
        with pytest.raises(ValueError, match="output_init"):
            MemoryConfig(output_init=bad)
    assert str(MemoryConfig(output_init=-0.0).output_init) == "0.0"
    assert MemoryConfig(output_init="lecun").output_init == 1.0
    assert MemoryConfig(output_init=0.5).output_init == 0.5
    model = ta.create_model("lmm", vocab_size=32, dim=32, depth=1, num_heads=2, output_init="zero")
    assert not model.blocks[0].memory.initial_weights["w2"].any()
    model.save_pretrained(str(tmp_path))
    config = (tmp_path / "config.json").read_text()
    assert '"output_init": 0.0' in config  # saved as the number the name stands for
    assert ta.load_model(str(tmp_path)).config.memory.output_init == 0.0
    # a file that saved the name (before the field was a number) loads it as its number
    (tmp_path / "config.json").write_text(
        config.replace('"output_init": 0.0', '"output_init": "zero"')
    )
    assert ta.load_model(str(tmp_path)).config.memory.output_init == 0.0
    # a file saved before the field: its weights are the model, and the field reads as the
    # scale they were drawn at (LeCun's), not today's default
    (tmp_path / "config.json").write_text(config.replace('"output_init": 0.0,', ""))
    loaded = ta.load_model(str(tmp_path))
    assert loaded.config.memory.output_init == 1.0 != MemoryConfig().output_init
    ids = torch.randint(0, 32, (1, 9))
    torch.testing.assert_close(loaded(ids)[0], model.eval()(ids)[0])


def test_the_layer_draws_half_lecun_and_the_atlas_presets_lecun():
    """The layer's default last weight is at half LeCun's scale (docs/architectures.md,
    "Initialisation"); the ATLAS presets keep LeCun's, the scale they were measured at."""
    assert MemoryConfig().output_init == 0.5
    scales = {"lmm": 0.5, "mag": 0.5, "mal": 0.5, "mac": 0.5, "atlas": 1.0, "omeganet": 1.0}
    scales.update({"atlas-mag": 1.0, "atlas-mal": 1.0, "atlas++": 1.0})
    for name, scale in scales.items():
        model = ta.create_model(name, vocab_size=32, dim=32, depth=1, num_heads=2)
        assert model.config.memory.output_init == scale, name


def test_a_run_drawn_at_another_output_init_resumes_with_the_saved_value():
    """A checkpoint of a run begun before the default changed (its weights drawn at 1) is the
    same model as today's rebuild at 0.5 up to that init-only field: it loads and keeps 1;
    any other difference is still refused."""
    from titans_atlas.models.pretrained import CheckpointError, match_saved_config

    make = lambda **kw: ta.create_model("lmm", vocab_size=32, dim=32, depth=1, num_heads=2, **kw)  # noqa: E731
    saved = make(output_init=1.0).config
    model = make()
    assert model.config.memory.output_init == 0.5
    match_saved_config("ckpt", saved, model)
    assert model.config == saved and model.config.memory.output_init == 1.0
    with pytest.raises(CheckpointError, match="ckpt holds a different model") as refused:
        match_saved_config("ckpt", make(lr_max=0.05).config, make())
    # the fields that differ, by name, not two whole configs
    assert "memory.lr_max=0.05 (this run: 0.1)" in str(refused.value)
    assert "memory.init_lr" not in str(refused.value)
    # a gate's starting value only chose the saved biases: taken back like output_init
    model = make()
    match_saved_config("ckpt", make(init_lr=0.05).config, model)
    assert model.config.memory.init_lr == 0.05


def test_a_complete_hf_memory_dict_without_output_init_reads_lecun():
    """The Hugging Face path (``upgrade_saved_memory``): a complete memory dict saved before
    the field was drawn at 1; a saved name reads as its number; a partial dict takes today's
    default."""
    from titans_atlas.layers.memory_config import upgrade_saved_memory

    full = MemoryConfig().__dict__.copy()
    del full["output_init"]
    assert MemoryConfig(**upgrade_saved_memory(full)).output_init == 1.0
    assert MemoryConfig(**upgrade_saved_memory({**full, "output_init": "zero"})).output_init == 0.0
    assert MemoryConfig(**upgrade_saved_memory({"lr_max": 0.1})).output_init == 0.5
