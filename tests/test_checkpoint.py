"""Checkpoints: ``save_pretrained`` writes config.json + model.safetensors (no pickle), and
``ta.load_model`` rebuilds a model with identical logits -- or raises ``ta.CheckpointError`` (a
ValueError) that says what is wrong with the directory."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

import titans_atlas as ta
from helpers import rewrite_saved_memory
from titans_atlas.layers.memory_config import (
    FORMAT_7_FIELDS,
    FORMAT_8_FIELDS,
    LATER_FIELDS,
    UNBOUNDED_GATES,
)
from titans_atlas.models.config import MAC_FIELDS, MAC_GATE_FIELDS, MAG_FIELDS

TINY = {"vocab_size": 50, "dim": 16, "depth": 2, "num_heads": 2, "window": 4, "chunk_size": 3}
PICKLE_SUFFIXES = {".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"}


def tiny(name: str, **overrides) -> ta.LanguageModel:
    torch.manual_seed(0)
    return ta.create_model(name, **{**TINY, **overrides})


def tokens(length: int = 13) -> torch.Tensor:
    return torch.randint(0, 50, (2, length), generator=torch.Generator().manual_seed(1))


def logits_of(model: ta.LanguageModel, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids)[0]


def unique_parameter_count(model: torch.nn.Module) -> int:
    """Elements in distinct parameter tensors (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


@pytest.fixture
def saved(tmp_path) -> Path:
    """A saved MAC checkpoint whose parameters differ from a fresh init."""
    model = tiny("mac")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    model.save_pretrained(str(tmp_path / "ckpt"))
    return tmp_path / "ckpt"


# ---------------------------------------------------------------------------------------------
# Round trip


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("name", ta.list_models())
def test_round_trip_gives_identical_logits(tmp_path, name, tie):
    model = tiny(name, tie_embeddings=tie)
    with torch.no_grad():  # move away from the init so a re-init would show
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    model.save_pretrained(str(tmp_path))
    torch.manual_seed(123)  # loading must not depend on the RNG
    loaded = ta.load_model(str(tmp_path))
    assert type(loaded) is type(model)
    assert loaded.config == model.config
    assert unique_parameter_count(loaded) == unique_parameter_count(model)
    ids = tokens()
    assert torch.equal(logits_of(loaded, ids), logits_of(model, ids))
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_tied_embeddings_stay_tied_after_loading(tmp_path):
    """Training a loaded tied model updates one shared tensor, as before saving."""
    model = tiny("mag", tie_embeddings=True)
    model.save_pretrained(str(tmp_path))
    loaded = ta.load_model(tmp_path)
    tied = [
        (a, b)
        for a, pa in loaded.named_parameters(remove_duplicate=False)
        for b, pb in loaded.named_parameters(remove_duplicate=False)
        if a < b and pa is pb
    ]
    original = [
        (a, b)
        for a, pa in model.named_parameters(remove_duplicate=False)
        for b, pb in model.named_parameters(remove_duplicate=False)
        if a < b and pa is pb
    ]
    assert original, "tie_embeddings=True should share the embedding with the LM head"
    assert tied == original


def test_round_trip_keeps_streaming_state_semantics(tmp_path):
    """A stream started on the saved model continues identically on the loaded one."""
    model = tiny("atlas-mal")
    model.save_pretrained(tmp_path)
    loaded = ta.load_model(tmp_path)
    ids = tokens(11)
    with torch.no_grad():
        _, state = model(ids[:, :5])
        expected, _ = model(ids[:, 5:], state=state)
        actual, _ = loaded(ids[:, 5:], state=state)
    assert torch.equal(actual, expected)


def test_checkpoint_is_json_plus_safetensors_without_pickle(tmp_path, monkeypatch):
    model = tiny("atlas")
    model.save_pretrained(str(tmp_path / "nested" / "dir"))  # missing parents are created
    directory = tmp_path / "nested" / "dir"
    files = sorted(p.name for p in directory.iterdir())
    assert files == ["config.json", "model.safetensors"]
    assert not any(Path(f).suffix in PICKLE_SUFFIXES for f in files)
    for path in directory.iterdir():
        assert not path.read_bytes().startswith(b"\x80"), f"{path.name} looks like a pickle"
    meta = json.loads((directory / "config.json").read_text())
    assert "atlas" in json.dumps(meta)
    with safe_open(str(directory / "model.safetensors"), framework="pt") as weights:
        assert len(list(weights.keys())) > 0

    def no_pickle(*args, **kwargs):
        raise AssertionError("load_model must not unpickle anything")

    monkeypatch.setattr(torch, "load", no_pickle)
    monkeypatch.setattr(pickle, "load", no_pickle)
    monkeypatch.setattr(pickle, "loads", no_pickle)
    monkeypatch.setattr(pickle, "Unpickler", no_pickle)
    ids = tokens()
    assert torch.equal(logits_of(ta.load_model(directory), ids), logits_of(model, ids))


def test_load_places_the_model_on_the_requested_device(saved):
    """The meta device is a device a CPU machine has: a loader that ignored ``device`` fails."""
    model = ta.load_model(saved, device="meta")
    assert all(p.device.type == "meta" for p in model.parameters())
    assert model.head.weight is model.embed.weight


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_saved_dtype_is_restored_and_dtype_casts(tmp_path, dtype):
    model = tiny("lmm").to(dtype)
    model.save_pretrained(tmp_path)
    loaded = ta.load_model(tmp_path)
    assert {p.dtype for p in loaded.parameters()} == {dtype}
    assert torch.equal(logits_of(loaded, tokens()), logits_of(model, tokens()))
    as_float = ta.load_model(tmp_path, dtype=torch.float32)
    assert {p.dtype for p in as_float.parameters()} == {torch.float32}


def test_from_pretrained_beside_save_pretrained(saved):
    model = ta.LanguageModel.from_pretrained(saved, dtype=torch.float64)
    assert model.config.name == "mac" and model.embed.weight.dtype == torch.float64
    mac_class = type(tiny("mac"))
    assert isinstance(mac_class.from_pretrained(saved), mac_class)
    with pytest.raises(ta.CheckpointError, match="'mac'"):
        type(tiny("lmm")).from_pretrained(saved)


def write_v3(directory: Path) -> None:
    """Format 3: no ``omega_gate_source``."""
    rewrite_saved_memory(directory, 3, drop=LATER_FIELDS)


def write_v2(directory: Path) -> None:
    """Format 2: no stability fields in the memory (nor the fields added after them)."""
    write_v3(directory)
    rewrite_saved_memory(directory, 2, drop=UNBOUNDED_GATES)


def write_v1(directory: Path, muon) -> None:
    """Format 1: muon/impl/checkpoint in the memory (and, as format 2, no stability fields)."""
    write_v2(directory)
    add = {"muon": muon, "impl": "chunk", "checkpoint": True}
    rewrite_saved_memory(directory, 1, drop=["update_rule"], add=add)


@pytest.mark.parametrize(
    ("name", "muon", "rule"),
    [("atlas", True, "muon"), ("omeganet", False, "momentum"), ("atlas", "chunk", "muon_chunk")],
)
def test_format_1_checkpoints_keep_loading(tmp_path, name, muon, rule):
    model = tiny(name, update_rule=rule, **UNBOUNDED_GATES, **LATER_FIELDS)
    model.save_pretrained(tmp_path)
    write_v1(tmp_path, muon)
    loaded = ta.load_model(tmp_path)
    assert loaded.config == model.config and loaded.config.memory.update_rule == rule
    layers = [m for m in loaded.modules() if isinstance(m, ta.NeuralMemory)]
    assert all(m.impl == "auto" and not m.checkpoint for m in layers)  # run-time: not loaded
    assert torch.equal(logits_of(loaded, tokens()), logits_of(model, tokens()))


def test_format_9_is_written_with_every_memory_field_and_without_runtime_choices(saved):
    meta = json.loads((saved / "config.json").read_text())
    assert meta["version"] == 9
    assert {"muon", "impl", "checkpoint"}.isdisjoint(meta["config"]["memory"])
    assert {*UNBOUNDED_GATES, *LATER_FIELDS, *FORMAT_7_FIELDS, *FORMAT_8_FIELDS, "qk_init"} <= set(
        meta["config"]["memory"]
    )
    assert {*MAC_FIELDS, *MAG_FIELDS, *MAC_GATE_FIELDS} <= set(meta["config"])


def test_format_3_checkpoints_load_with_the_omega_gates_they_had(tmp_path):
    """Format 3 predates ``omega_gate_source``: its Omega gates were the step's."""
    model = tiny("omeganet", omega_gate_source="step")
    model.save_pretrained(tmp_path)
    write_v3(tmp_path)
    loaded = ta.load_model(tmp_path)
    assert loaded.config == model.config and loaded.config.memory.omega_gate_source == "step"
    assert torch.equal(logits_of(loaded, tokens()), logits_of(model, tokens()))
    meta = json.loads((tmp_path / "config.json").read_text())
    meta["config"]["memory"]["omega_gate_source"] = "tap"  # a field format 3 never wrote
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ta.CheckpointError, match="omega_gate_source"):
        ta.load_model(tmp_path)


def test_the_omega_gate_source_survives_a_round_trip(tmp_path):
    model = tiny("omeganet", omega_gate_source="tap")
    model.save_pretrained(tmp_path)
    loaded = ta.load_model(tmp_path)
    assert loaded.config.memory.omega_gate_source == "tap"
    assert torch.equal(logits_of(loaded, tokens()), logits_of(model, tokens()))


@pytest.mark.parametrize("name", ["lmm", "atlas"])
def test_format_2_checkpoints_load_as_the_unbounded_layer_they_were(tmp_path, name):
    """A format-2 config has no stability fields: it loads with the values that give the
    layer it was trained as (gates sigmoid(.), no clip, decay toward zero), not with today's
    defaults -- same logits as the model built that way, and the old gate formula."""
    model = tiny(name, **UNBOUNDED_GATES, **LATER_FIELDS)
    model.save_pretrained(tmp_path)
    write_v2(tmp_path)
    loaded = ta.load_model(tmp_path)
    assert loaded.config == model.config
    for key, value in UNBOUNDED_GATES.items():
        assert getattr(loaded.config.memory, key) == value
    assert torch.equal(logits_of(loaded, tokens()), logits_of(model, tokens()))
    layer = next(m for m in loaded.modules() if isinstance(m, ta.NeuralMemory))
    x = torch.randn(1, 3, layer.to_gates.in_features)
    raw = torch.sigmoid(layer.to_gates(x)).view(1, 3, -1, layer.num_heads)  # [B, T, G, H]
    lr, momentum, decay, _ = layer._gates(x)
    torch.testing.assert_close(lr, raw[:, :, 0] * layer.config.lr_max)
    torch.testing.assert_close(momentum, raw[:, :, 1])
    torch.testing.assert_close(decay, raw[:, :, 2])


def test_a_format_2_config_with_stability_fields_is_refused(tmp_path):
    tiny("lmm").save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    meta = json.loads(path.read_text())
    meta["version"] = 2
    path.write_text(json.dumps(meta))
    load_fails(tmp_path, "format 2 has no config.memory field", "decay_min")


# ---------------------------------------------------------------------------------------------
# Bad checkpoints -> ta.CheckpointError (a ValueError) with a message that says what is wrong


def test_checkpoint_error_is_a_value_error():
    assert issubclass(ta.CheckpointError, ValueError)


def load_fails(directory, *needles: str) -> str:
    """load_model must raise CheckpointError whose message contains each needle."""
    with pytest.raises(ta.CheckpointError) as info:
        ta.load_model(directory)
    message = str(info.value)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


def test_missing_directory(tmp_path):
    load_fails(tmp_path / "never-saved", "never-saved")


def test_missing_config(saved):
    (saved / "config.json").unlink()
    load_fails(saved, "config.json")


def test_missing_weights(saved):
    (saved / "model.safetensors").unlink()
    load_fails(saved, "model.safetensors")


@pytest.mark.parametrize(
    "text",
    ['{"format": "titans-atlas", "config": {', "", "\x00\x01 not json", "[1, 2, 3]", "null"],
    ids=["truncated", "empty", "binary", "a-list", "null"],
)
def test_corrupt_config_json(saved, text):
    (saved / "config.json").write_text(text)
    load_fails(saved, "config.json")


def test_config_json_that_is_not_utf8(saved):
    (saved / "config.json").write_bytes(b"\xff\xfe\xfa{}")
    load_fails(saved, "config.json")


def edit_config(directory: Path, edit) -> None:
    path = directory / "config.json"
    meta = json.loads(path.read_text())
    edit(meta["config"])
    path.write_text(json.dumps(meta))


def test_config_naming_an_unknown_model(saved):
    edit_config(saved, lambda c: c.update(name="no-such-model"))
    load_fails(saved, "no-such-model")


def test_config_with_an_unknown_field(saved):
    edit_config(saved, lambda c: c.update(mystery_field=1))
    load_fails(saved, "mystery_field")


def test_config_with_an_unknown_memory_field(saved):
    edit_config(saved, lambda c: c["memory"].update(mystery_memory_field=1))
    load_fails(saved, "mystery_memory_field")


def test_config_with_a_bad_value(saved):
    edit_config(saved, lambda c: c.update(dim=0))
    load_fails(saved, "dim")


def test_config_without_the_model_name(saved):
    edit_config(saved, lambda c: c.pop("name"))
    load_fails(saved, "config.json")


def test_truncated_weights(saved):
    path = saved / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    load_fails(saved, "model.safetensors")


def test_weights_with_a_corrupt_header(saved):
    path = saved / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[8:40] = b"#" * 32  # the JSON header starts after an 8-byte length
    path.write_bytes(bytes(data))
    load_fails(saved, "model.safetensors")


@pytest.mark.parametrize("content", [b"", b"\x00" * 7, b"not a safetensors file at all"])
def test_weights_that_are_not_safetensors(saved, content):
    (saved / "model.safetensors").write_bytes(content)
    load_fails(saved, "model.safetensors")


def test_weights_of_a_different_width(saved):
    edit_config(saved, lambda c: c.update(dim=32))
    load_fails(saved, "model.safetensors")


def test_weights_of_a_different_architecture(saved, tmp_path):
    """LMM weights (no attention) under the MAC config."""
    tiny("lmm").save_pretrained(tmp_path / "lmm")
    (saved / "model.safetensors").write_bytes((tmp_path / "lmm" / "model.safetensors").read_bytes())
    load_fails(saved, "model.safetensors", "'lmm'", "'mac'")


def test_weights_of_a_same_shaped_architecture(tmp_path):
    """MAG and MAC have identically named and shaped parameters: only the name tells them apart."""
    tiny("mag").save_pretrained(tmp_path / "mag")
    tiny("mac").save_pretrained(tmp_path / "mac")
    weights = (tmp_path / "mag" / "model.safetensors").read_bytes()
    (tmp_path / "mac" / "model.safetensors").write_bytes(weights)
    load_fails(tmp_path / "mac", "'mag'", "'mac'")


def test_weights_of_a_different_depth(saved):
    edit_config(saved, lambda c: c.update(depth=3))
    message = load_fails(saved, "model.safetensors")
    assert "blocks.2" in message  # names the missing tensors


def test_untied_weights_under_a_tied_config(tmp_path):
    """An untied checkpoint carries a separate head; loading it as tied must not silently drop
    it (the head would change)."""
    tiny("lmm", tie_embeddings=False).save_pretrained(tmp_path)
    edit_config(tmp_path, lambda c: c.update(tie_embeddings=True))
    load_fails(tmp_path, "model.safetensors")


def test_tied_weights_under_an_untied_config(tmp_path):
    """A tied checkpoint has no separate head; an untied config must not get a random one."""
    tiny("lmm", tie_embeddings=True).save_pretrained(tmp_path)
    edit_config(tmp_path, lambda c: c.update(tie_embeddings=False))
    load_fails(tmp_path, "model.safetensors")
