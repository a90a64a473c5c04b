"""Model configuration: create_model / model_config accept every ModelConfig field and every
MemoryConfig field (by name or through ``memory=``), reject unknown names and bad values with a
ValueError that names the culprit, and the size presets describe models of their nominal size
(counted on the meta device: nothing is allocated)."""

from __future__ import annotations

from contextlib import ExitStack
from unittest import mock

import pytest
import torch

import titans_atlas as ta

TINY = {"vocab_size": 50, "dim": 16, "depth": 2, "num_heads": 2, "window": 4, "chunk_size": 3}
MODELS = ta.list_models()
NOMINAL = {"170m": 170e6, "340m": 340e6, "760m": 760e6}


def logits_of(model: ta.LanguageModel) -> torch.Tensor:
    ids = torch.randint(0, 50, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model(ids)[0]


def seeded(name: str, **overrides) -> ta.LanguageModel:
    torch.manual_seed(0)
    return ta.create_model(name, **overrides)


# ---------------------------------------------------------------------------------------------
# Accepted settings


def test_registry_lists_every_architecture_of_the_spec():
    expected = {"mac", "mag", "mal", "lmm", "atlas", "atlas-mag", "atlas-mal", "omeganet"}
    expected |= {"atlas++", "swa", "transformer"}
    assert expected <= set(MODELS), f"missing: {sorted(expected - set(MODELS))}"
    assert len(MODELS) == len(set(MODELS))


@pytest.mark.parametrize("name", MODELS)
def test_create_model_applies_model_config_fields(name):
    model = ta.create_model(
        name,
        vocab_size=37,
        dim=24,
        depth=3,
        num_heads=3,
        window=5,
        num_persistent=2,
        ffn_expansion=2.0,
        tie_embeddings=False,
    )
    config = model.config
    assert isinstance(model, ta.LanguageModel)
    assert (config.name, config.vocab_size, config.dim, config.depth) == (name, 37, 24, 3)
    assert (config.num_heads, config.window, config.num_persistent) == (3, 5, 2)
    assert (config.ffn_expansion, config.tie_embeddings) == (2.0, False)
    logits, state = model(torch.randint(0, 37, (2, 6)))
    assert logits.shape == (2, 6, 37)
    assert state.position == 6


@pytest.mark.parametrize("name", MODELS)
def test_memory_fields_by_name_and_as_a_dict_are_routed_into_memory_config(name):
    by_name = ta.model_config(name, chunk_size=5, init_decay=0.01)
    as_dict = ta.model_config(name, memory={"chunk_size": 5, "init_decay": 0.01})
    assert isinstance(by_name.memory, ta.MemoryConfig)
    assert by_name.memory.chunk_size == as_dict.memory.chunk_size == 5
    assert by_name.memory.init_decay == as_dict.memory.init_decay == 0.01
    assert by_name == as_dict


@pytest.mark.parametrize("name", ["atlas", "atlas-mag", "omeganet", "atlas++"])
def test_memory_overrides_keep_the_architecture_defaults(name):
    """Overriding one memory field must not reset what defines the architecture."""
    default = ta.model_config(name).memory
    defining = ("model", "omega_window", "feature_map", "update_rule")
    by_name, as_dict = (
        ta.model_config(name, chunk_size=5),
        ta.model_config(name, memory={"read": "before"}),
    )
    for config in (by_name, as_dict):
        kept = {f: getattr(config.memory, f) for f in defining}
        assert kept == {f: getattr(default, f) for f in defining}
    assert default.omega_window > 1 and default.feature_map == "polynomial"


def test_architecture_defaults_follow_the_spec():
    atlas = ta.model_config("atlas").memory
    assert (atlas.omega_window, atlas.feature_map, atlas.poly_degree) == (8, "polynomial", 2)
    assert atlas.update_rule == "muon"
    assert atlas.residual and atlas.model == "mlp" and atlas.depth == 2
    omeganet = ta.model_config("omeganet").memory
    assert omeganet.update_rule == "momentum" and omeganet.residual
    # plain momentum's writes start at 0.1 and may reach 1 (a residual read drowns small ones)
    assert (omeganet.init_lr, omeganet.lr_max) == (0.1, 1.0)
    assert (atlas.init_lr, atlas.lr_max) == (0.02, 0.1)  # Muon's steps are unit-scale
    assert ta.model_config("atlas++").memory.model == "gated_mlp"
    for name in ("mac", "mag", "mal", "lmm"):
        titans = ta.model_config(name).memory
        assert titans.omega_window == 1 and titans.feature_map is None
        assert titans.update_rule == "momentum"


def test_memory_config_object_is_accepted():
    memory = ta.MemoryConfig(model="linear", chunk_size=2)
    config = ta.model_config("lmm", memory=memory)
    assert config.memory.model == "linear" and config.memory.chunk_size == 2
    assert ta.create_model("lmm", **TINY | {"memory": memory}).config.memory.model == "linear"


def test_model_config_builds_nested_memory_from_a_dict():
    config = ta.ModelConfig(name="mag", memory={"chunk_size": 7})
    assert isinstance(config.memory, ta.MemoryConfig) and config.memory.chunk_size == 7
    assert ta.ModelConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize("name", ["mac", "lmm", "atlas"])
def test_memory_chunk_size_reaches_the_layers(name):
    """The chunk size is part of the model's definition (docs/memory.md): same seed, different
    chunk size -> different logits; same chunk size -> identical logits."""
    small = TINY | {"chunk_size": 1}
    reference = logits_of(seeded(name, **small))
    assert torch.equal(logits_of(seeded(name, **small)), reference)
    assert not torch.equal(logits_of(seeded(name, **TINY | {"chunk_size": 4})), reference)


def test_memory_fields_reach_the_layers_through_a_dict():
    plain = logits_of(seeded("mag", **TINY))
    assert torch.equal(logits_of(seeded("mag", **TINY, memory={"chunk_size": 3})), plain)
    assert not torch.equal(logits_of(seeded("mag", **TINY, memory={"read": "before"})), plain)


# ---------------------------------------------------------------------------------------------
# Rejected settings: a ValueError that names the culprit


def test_unknown_model_is_a_value_error_naming_it():
    for call in (ta.create_model, ta.model_config):
        with pytest.raises(ValueError, match="no-such-model"):
            call("no-such-model")


def test_unknown_preset_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="9000b"):
        ta.create_model("mac", "9000b")


@pytest.mark.parametrize("call", [ta.create_model, ta.model_config], ids=["create", "config"])
def test_unknown_field_is_a_value_error_naming_it(call):
    with pytest.raises(ValueError, match="bogus_field"):
        call("mac", bogus_field=1)


def test_unknown_nested_memory_field_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="bogus_memory_field"):
        ta.create_model("mac", **TINY, memory={"bogus_memory_field": 1})


def test_from_dict_rejects_unknown_fields_by_name():
    data = ta.model_config("mac").to_dict() | {"extra_field": 3}
    with pytest.raises(ValueError, match="extra_field"):
        ta.ModelConfig.from_dict(data)


BAD_VALUES = {
    "vocab_size=0": ({"vocab_size": 0}, "vocab_size"),
    "dim=0": ({"dim": 0}, "dim"),
    "depth=0": ({"depth": 0}, "depth"),
    "depth=2.5": ({"depth": 2.5}, "depth"),
    "num_heads=0": ({"num_heads": 0}, "num_heads"),
    "num_heads-not-dividing-dim": ({"num_heads": 3}, "num_heads"),
    "window=0": ({"window": 0}, "window"),
    "num_persistent=-1": ({"num_persistent": -1}, "num_persistent"),
    "ffn_expansion=0": ({"ffn_expansion": 0}, "ffn_expansion"),
    "chunk_size=0": ({"chunk_size": 0}, "chunk_size"),
    "chunk_size=1.5": ({"chunk_size": 1.5}, "chunk_size"),
    "omega_window=0": ({"omega_window": 0}, "omega_window"),
    "memory-model": ({"model": "transformer"}, "model"),
    "memory-depth=1": ({"memory": {"depth": 1}}, "depth"),
    "expansion=0": ({"expansion": 0}, "expansion"),
    "activation": ({"activation": "no-such-activation"}, "activation"),
    "feature_map": ({"feature_map": "cubic"}, "feature_map"),
    "poly_degree=-1": ({"feature_map": "polynomial", "poly_degree": -1}, "poly_degree"),
    "read": ({"read": "sideways"}, "read"),
    "update_rule": ({"update_rule": "sometimes"}, "update_rule"),
    "update_rule=True": ({"update_rule": True}, "update_rule"),
    "output_gate": ({"output_gate": "tanh"}, "output_gate"),
    "init_lr=1.5": ({"init_lr": 1.5}, "init_lr"),
    "init_decay=0": ({"init_decay": 0.0}, "init_decay"),
    "lr_max=0": ({"lr_max": 0.0}, "lr_max"),
    "init_lr>lr_max": ({"lr_max": 0.05, "init_lr": 0.1}, "init_lr|lr_max"),
    "conv_kernel=0": ({"conv_kernel": 0}, "conv_kernel"),
    "residual='no'": ({"residual": "no"}, "residual"),
    "momentum_max=0": ({"momentum_max": 0.0}, "momentum_max"),
    "momentum_max=1.5": ({"momentum_max": 1.5}, "momentum_max"),
    "init_momentum>=momentum_max": ({"momentum_max": 0.4}, "init_momentum"),
    "decay_min=1": ({"decay_min": 1.0}, "decay_min"),
    "decay_min=-0.1": ({"decay_min": -0.1}, "decay_min"),
    "init_decay<=decay_min": ({"decay_min": 0.01}, "init_decay"),
    "max_grad_norm=0": ({"max_grad_norm": 0.0}, "max_grad_norm"),
    "max_grad_norm=nan": ({"max_grad_norm": float("nan")}, "max_grad_norm"),
    "max_grad_norm='1'": ({"max_grad_norm": "1"}, "max_grad_norm"),
    "decay_target": ({"decay_target": "mean"}, "decay_target"),
}


@pytest.mark.parametrize("case", list(BAD_VALUES), ids=list(BAD_VALUES))
def test_bad_value_is_a_value_error_naming_the_field(case):
    """Caught when the model is built, not at the first forward; the message names the field."""
    overrides, field = BAD_VALUES[case]
    with pytest.raises(ValueError, match=field):
        ta.create_model("mag", **{**TINY, **overrides})


def test_residual_memory_with_unprojected_polynomial_keys_is_rejected():
    with pytest.raises(ValueError, match="feature_projection"):
        ta.create_model("atlas", **TINY, feature_projection=False)
    ta.create_model("atlas", **TINY, feature_projection=False, residual=False)  # legal


# ---------------------------------------------------------------------------------------------
# Size presets


def meta_parameter_count(name: str, preset: str) -> int:
    """Parameters of a preset model built on the meta device (shapes only, no storage). The
    random initialisers are stubbed out: on meta they only cost time, never change a shape."""
    keep = lambda tensor, *args, **kwargs: tensor  # noqa: E731
    with ExitStack() as stack:
        for init in ("normal_", "uniform_", "kaiming_uniform_", "trunc_normal_"):
            stack.enter_context(mock.patch.object(torch.nn.init, init, keep))
        stack.enter_context(torch.device("meta"))
        model = ta.create_model(name, preset)
    assert all(p.device.type == "meta" for p in model.parameters())
    return model.num_parameters()


def test_presets_are_named_and_ordered():
    assert {"170m", "340m", "760m"} <= set(ta.SIZE_PRESETS)
    for preset in NOMINAL:
        config = ta.model_config("mac", preset)
        assert config.dim % config.num_heads == 0
        assert config.vocab_size >= 32000
    dims = [ta.model_config("mac", p).dim for p in NOMINAL]
    assert dims == sorted(dims)


@pytest.mark.parametrize("name", MODELS)
def test_preset_parameter_counts_are_near_their_names(name):
    """Counted on the meta device (no 760M allocation). A preset's count must be within a
    factor 1.5 of its name, and grow with the preset; 'debug' stays tiny."""
    counts = {preset: meta_parameter_count(name, preset) for preset in NOMINAL}
    for preset, count in counts.items():
        assert NOMINAL[preset] / 1.5 <= count <= NOMINAL[preset] * 1.5, (
            f"{name} {preset}: {count / 1e6:.1f}M parameters"
        )
    assert counts["170m"] < counts["340m"] < counts["760m"]
    assert meta_parameter_count(name, "debug") < 1_000_000


def test_preset_then_overrides_take_precedence():
    config = ta.model_config("atlas", "170m", window=64, chunk_size=16)
    preset = ta.SIZE_PRESETS["170m"]
    assert (config.dim, config.depth, config.num_heads) == (
        preset["dim"],
        preset["depth"],
        preset["num_heads"],
    )
    assert config.window == 64 and config.memory.chunk_size == 16
    assert config.memory.omega_window == 8  # the architecture default survives the preset


@pytest.mark.parametrize("name", ["mac", "atlas", "transformer"])
def test_meta_parameter_count_matches_a_real_model(name):
    """The meta-device count equals the count of an allocated model of the same config."""
    real = ta.create_model(name, "debug").num_parameters()
    assert meta_parameter_count(name, "debug") == real


# ---------------------------------------------------------------------------------------------
# Run-time choices live outside the config


@pytest.mark.parametrize(
    ("field", "where"),
    [("muon", "update_rule"), ("impl", "memory_impl"), ("checkpoint", "memory_checkpoint")],
)
def test_fields_that_left_the_config_are_refused_with_their_new_home(field, where):
    with pytest.raises(ValueError, match=where):
        ta.create_model("lmm", **TINY, **{field: True})
    with pytest.raises(ValueError, match=where):
        ta.ModelConfig(memory={field: True})


def test_set_runtime_reaches_every_memory_layer_and_never_the_config():
    model = ta.create_model("mag", **TINY)
    before = model.config.to_dict()
    assert model.set_runtime(memory_impl="reference", memory_checkpoint=True) is model
    layers = [m for m in model.modules() if isinstance(m, ta.NeuralMemory)]
    assert len(layers) == TINY["depth"]
    assert all(m.impl == "reference" and m.checkpoint for m in layers)
    model.set_runtime(memory_impl="chunk")  # None leaves the other choice as it is
    assert all(m.impl == "chunk" and m.checkpoint for m in layers)
    assert model.config.to_dict() == before
    assert "impl" not in str(before) and "checkpoint" not in str(before)


def test_the_implementation_set_at_run_time_is_the_one_that_runs():
    """Reference and chunked forms agree (to fp32 rounding) but not bitwise: a model whose
    runtime choice were ignored would give bitwise-equal logits for both."""
    model = seeded("lmm", **TINY)
    ids = torch.randint(0, 50, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        chunk = model.set_runtime(memory_impl="chunk")(ids)[0]
        reference = model.set_runtime(memory_impl="reference")(ids)[0]
    assert not torch.equal(chunk, reference)
    torch.testing.assert_close(chunk, reference, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"memory_impl": "fast"}, "memory_impl"), ({"memory_checkpoint": "yes"}, "memory_checkpoint")],
)
def test_set_runtime_rejects_bad_values_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ta.create_model("lmm", **TINY).set_runtime(**kwargs)


def test_runtime_choices_reach_memory_scan(monkeypatch):
    import titans_atlas.layers.neural_memory as layer

    seen, original = [], layer.memory_scan

    def spy(*args, **kwargs):
        seen.append((kwargs["impl"], kwargs["checkpoint"]))
        return original(*args, **kwargs)

    monkeypatch.setattr(layer, "memory_scan", spy)
    model = ta.create_model("lmm", **TINY)
    model(torch.zeros(1, 4, dtype=torch.long))
    model.set_runtime(memory_impl="chunk", memory_checkpoint=True)(torch.zeros(1, 4).long())
    assert seen == [("auto", False)] * 2 + [("chunk", True)] * 2
