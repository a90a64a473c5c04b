"""Attention KV caches are checked like the memory's state, and every field of a state file is
type-checked (fuzzing review): an edited cache or file is refused with a ValueError naming the
block or file and the field, never NaN logits, a silent change or a traceback."""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from titans_atlas import create_model
from titans_atlas.cli import main
from titans_atlas.io.state import load_state, save_state
from titans_atlas.layers.attention import KVCache
from titans_atlas.ops import validating

ATTENTION_MODELS = ["swa", "transformer", "mag", "mac"]


def _stream(name: str, length: int = 10):
    torch.manual_seed(0)
    model = create_model(name, preset="debug").eval()
    ids = torch.randint(0, 64, (1, length))
    with torch.no_grad():
        _, state = model(ids)
    return model, ids, state


def _cache(state, block: int = 0) -> KVCache:
    part = state.blocks[block]
    return part if isinstance(part, KVCache) else part.attn


def _where(name: str) -> str:
    return r"state\.blocks\[0\]" + ("" if name in ("swa", "transformer") else r"\.attn")


def _nan_keys(c):
    c.keys[..., 0] = float("nan")


def _inf_values(c):
    c.values[0, 0, 0, 0] = float("inf")


def _positions_far(c):
    c.positions.fill_(10**6)


def _positions_negative(c):
    c.positions[0] = -5


def _positions_zero(c):
    c.positions.zero_()


VALUE_EDITS = {
    "nan keys": (_nan_keys, "keys contain NaN or inf"),
    "inf values": (_inf_values, "values contain NaN or inf"),
    "future positions": (_positions_far, "positions hold 1000000, past state.position=10"),
    "negative position": (_positions_negative, "positions hold -5"),
    "zeroed positions": (_positions_zero, "positions do not match state.position=10"),
}


@pytest.mark.parametrize("name", ATTENTION_MODELS)
@pytest.mark.parametrize("edit", VALUE_EDITS)
def test_an_edited_cache_is_refused_naming_block_and_field(name, edit):
    model, ids, state = _stream(name)
    change, message = VALUE_EDITS[edit]
    change(_cache(state))
    with pytest.raises(ValueError, match=_where(name) + r" \(attention cache\): " + message):
        model(ids, state=state)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: setattr(c, "positions", c.positions.float()), "positions must be int64"),
        (lambda c: setattr(c, "positions", c.positions[:5]), r"positions must be \["),
        (lambda c: setattr(c, "keys", c.keys[:, :, :3]), r"keys must be \[B, H, slots, Dh\]"),
        (lambda c: setattr(c, "values", c.values.long()), "values must be floating point"),
        (lambda c: setattr(c, "keys", None), "keys must be a tensor"),
    ],
)
@pytest.mark.parametrize("name", ["swa", "transformer", "mac"])
def test_a_cache_of_the_wrong_layout_is_refused_even_with_value_checks_off(name, change, message):
    model, ids, state = _stream(name)
    change(_cache(state))
    with validating(False), pytest.raises(ValueError, match=message):
        model(ids, state=state)


@pytest.mark.parametrize("off", ["validating", "set_runtime"])
@pytest.mark.parametrize("name", ["swa", "mac"])
def test_value_checks_off_reads_no_cache_value(name, off):
    """The decode path (validating(False), as generate and DecodeStep run each step) and a
    model with validate=False stay cheap: the cache's values are not read, only its layout."""
    model, ids, state = _stream(name)
    _cache(state).keys[..., 0] = float("nan")
    if off == "set_runtime":
        model.set_runtime(validate=False)
        logits, _ = model(ids, state=state)
    else:
        with validating(False):
            logits, _ = model(ids, state=state)
    assert torch.isnan(logits).any()  # not refused: no value was read


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("batch_size", "1", r"state\.batch_size must be an integer >= 1, got '1' \(str\)"),
        ("fingerprint", None, r"state\.fingerprint must be a tuple of \(field, value\) pairs"),
        ("fingerprint", "abc", r"state\.fingerprint must be a tuple"),
        ("position", 2**63 + 5, r"state\.position is about 2\*\*63, past"),
    ],
)
def test_a_mistyped_state_field_is_refused_by_name(field, value, message):
    model, ids, state = _stream("swa")
    setattr(state, field, value)
    with pytest.raises(ValueError, match=message):
        model(ids, state=state)


def test_a_string_chunk_size_is_not_called_different_from_itself():
    model, ids, state = _stream("lmm")
    state.blocks[0].memory.chunk_size = "16"
    with pytest.raises(ValueError, match=r"state\.chunk_size must be None or an integer >= 1"):
        model(ids, state=state)


@pytest.mark.parametrize("name", [*ATTENTION_MODELS, "mal", "lmm"])
def test_an_untouched_state_streams_bit_identically(name, tmp_path):
    torch.manual_seed(0)
    model = create_model(name, preset="debug").eval()
    ids = torch.randint(0, 64, (2, 70))
    with torch.no_grad():
        whole, _ = model(ids)
        first, state = model(ids[:, :33])
        save_state(state, tmp_path / "s.safetensors")
        loaded, _ = load_state(tmp_path / "s.safetensors")
        checked, _ = model(ids[:, 33:], state=loaded)
        with validating(False):
            unchecked, _ = model(ids[:, 33:], state=state)
    assert torch.equal(checked, unchecked)
    torch.testing.assert_close(torch.cat([first, checked], dim=1), whole, rtol=1e-4, atol=1e-4)


# -- state files --------------------------------------------------------------------------


def _saved(tmp_path, name="swa"):
    _, _, state = _stream(name, 7)
    path = tmp_path / "ok.safetensors"
    save_state(state, path, {"model": name})
    with safe_open(str(path), "pt") as handle:
        meta = handle.metadata()
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
    return meta, tensors, json.loads(meta["structure"])


def _rewrite(tmp_path, meta, tensors, structure=None, raw=None):
    meta = dict(meta)
    if structure is not None:
        meta["structure"] = json.dumps(structure)
    if raw is not None:
        meta["structure"] = raw
    path = tmp_path / "edited.safetensors"
    save_file(tensors, str(path), metadata=meta)
    return path


def _cache_keys(structure):
    cache = structure["fields"]["blocks"]["list"][0]["fields"]
    return {f: cache[f]["tensor"] for f in ("keys", "values", "positions")}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t, k: t[k["keys"]].__setitem__((0, 0, 0, 0), float("nan")), "keys contain NaN"),
        (lambda t, k: t.__setitem__(k["positions"], t[k["positions"]].float()), "must be int64"),
        (lambda t, k: t.__setitem__(k["positions"], t[k["positions"]][:5].clone()), "must be"),
        (lambda t, k: t.__setitem__(k["positions"], torch.zeros_like(t[k["positions"]])), "match"),
        (lambda t, k: t[k["positions"]].__setitem__(0, 100), "hold 100, past state"),
    ],
)
def test_a_state_file_with_an_edited_cache_is_refused_naming_it(tmp_path, change, message):
    meta, tensors, structure = _saved(tmp_path)
    change(tensors, _cache_keys(structure))
    path = _rewrite(tmp_path, meta, tensors)
    with pytest.raises(ValueError, match=message) as caught:
        load_state(path)
    assert str(path) in str(caught.value)
    assert r"state.blocks[0] (attention cache)" in str(caught.value)


def _set(*keys, value):
    def change(structure):
        node = structure
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return change


BLOCK0 = ("fields", "blocks", "list", 0, "fields")
MEMORY = (*BLOCK0, "memory", "fields")

FIELD_EDITS = {
    "fingerprint null": (
        _set("fields", "fingerprint", value={"value": None}),
        r"state\.fingerprint must be a tuple of \(field, value\) pairs, got None",
    ),
    "fingerprint string": (
        _set("fields", "fingerprint", value={"value": "abc"}),
        r"state\.fingerprint must be a tuple of \(field, value\) pairs, got 'abc' \(str\)",
    ),
    "batch string": (
        _set("fields", "batch_size", "value", value="1"),
        r"state\.batch_size must be an integer in \[1, 2\*\*31\], got '1' \(str\)",
    ),
    "position float": (
        _set("fields", "position", "value", value=7.0),
        r"state\.position must be an integer in \[0, 2\*\*53\], got 7\.0 \(float\)",
    ),
    "position past 2**63": (
        _set("fields", "position", "value", value=2**63 + 5),
        r"state\.position must be an integer in \[0, 2\*\*53\]",
    ),
    "position 10**6": (
        _set("fields", "position", "value", value=10**6),
        r"state\.position=1000000 but block 0's memory stands at 7: the state was edited",
    ),
    "chunk size string": (
        _set(*MEMORY, "memory", "fields", "chunk_size", "value", value="16"),
        r"state\.blocks\[0\]\.memory\.memory\.chunk_size must be an integer in \[1, 2\*\*31\] "
        r"or null, got '16' \(str\)",
    ),
    "memory position string": (
        _set(*MEMORY, "memory", "fields", "position", "value", value="7"),
        r"state\.blocks\[0\]\.memory\.memory\.position must be an integer",
    ),
    "blocks tuple": (
        lambda s: s["fields"].update(blocks={"tuple": s["fields"]["blocks"]["list"]}),
        r"state\.blocks must be a list, got a tuple",
    ),
    "unknown model": (
        lambda s: s["fields"]["fingerprint"]["tuple"][0]["tuple"].__setitem__(1, {"value": "gpt"}),
        r"state\.fingerprint names model 'gpt'",
    ),
}


@pytest.mark.parametrize("edit", FIELD_EDITS)
def test_a_mistyped_state_file_field_is_refused_naming_file_field_and_type(tmp_path, edit):
    meta, tensors, structure = _saved(tmp_path, "mag")
    change, message = FIELD_EDITS[edit]
    change(structure)
    path = _rewrite(tmp_path, meta, tensors, structure)
    with pytest.raises(ValueError, match=message) as caught:
        load_state(path)
    assert str(path) in str(caught.value)


def test_a_5000_digit_integer_is_refused_naming_the_file(tmp_path):
    meta, tensors, structure = _saved(tmp_path)
    raw = json.dumps(structure).replace('"value": 7', '"value": ' + "9" * 5000, 1)
    path = _rewrite(tmp_path, meta, tensors, raw=raw)
    with pytest.raises(ValueError, match="more than 4300 digits") as caught:
        load_state(path)
    assert str(path) in str(caught.value) and "Exceeds the limit" not in str(caught.value)


def test_generate_refuses_an_edited_state_file_in_one_line(tmp_path, capsys):
    model = tmp_path / "model"
    create_model("swa", preset="debug").save_pretrained(str(model))
    argv = ["generate", "--checkpoint", str(model), "--prompt", "Hi", "--max-new-tokens", "2",
            "--compile", "false", "--seed", "0"]  # fmt: skip
    saved = tmp_path / "s.safetensors"
    assert main([*argv, "--save-state", str(saved)]) == 0
    with safe_open(str(saved), "pt") as handle:
        meta = handle.metadata()
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
    tensors[_cache_keys(json.loads(meta["structure"]))["keys"]][..., 0] = float("nan")
    bad = _rewrite(tmp_path, meta, tensors)
    capsys.readouterr()
    assert main([*argv, "--load-state", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "keys contain NaN or inf" in err and "Traceback" not in err
    assert main([*argv, "--load-state", str(saved)]) == 0  # the untouched file still loads
