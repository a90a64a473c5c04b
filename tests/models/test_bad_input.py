"""Bad input at every public entry point gets a clear error: the sweep of issue 13 as a table.

Each case is (id, call, expected exception type, words the message must contain). ``call``
takes the fixture ``env`` (a tiny model, a valid state, a saved checkpoint) and makes one bad
call. To add a case, add a row: the test fails until the library raises that type with those
words. ``memory_scan``'s own cases live in tests/ops/.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file

import titans_atlas as ta
from titans_atlas.generation import Sampler, SamplingConfig, decode_one_token, generate, prefill
from titans_atlas.models import build_model
from titans_atlas.ops.state import map_tensors

VOCAB = 50
TINY = {"vocab_size": VOCAB, "dim": 16, "depth": 2, "num_heads": 2, "window": 4, "chunk_size": 3}
CheckpointError = ta.CheckpointError


def ids(*shape: int, dtype=torch.long) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(1)).to(dtype)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> SimpleNamespace:
    torch.manual_seed(0)
    model = ta.create_model("mac", **TINY)
    with torch.no_grad():
        _, state = model(ids(2, 7))
    saved = tmp_path_factory.mktemp("ckpt")
    model.save_pretrained(saved)
    return SimpleNamespace(model=model, state=state, saved=saved, tmp=tmp_path_factory)


def other(name: str = "mac", **overrides) -> ta.LanguageModel:
    return ta.create_model(name, **{**TINY, **overrides})


def state_of(model: ta.LanguageModel) -> ta.ModelState:
    with torch.no_grad():
        return model(ids(2, 7))[1]


def config_edit(env, edit) -> Path:
    """A copy of the saved checkpoint whose config.json went through ``edit(meta)``."""
    directory = env.tmp.mktemp("edited")
    for name in ("config.json", "model.safetensors"):
        (directory / name).write_bytes((env.saved / name).read_bytes())
    meta = json.loads((directory / "config.json").read_text())
    edit(meta)
    (directory / "config.json").write_text(json.dumps(meta))
    return directory


def weights_edit(env, edit) -> Path:
    """A copy of the saved checkpoint whose tensors went through ``edit(tensors)``."""
    directory = config_edit(env, lambda meta: None)
    tensors = load_file(str(directory / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"model": "mac"})
    return directory


def first_weight(tensors: dict) -> str:
    return sorted(tensors)[0]


def gen(env, **kwargs):
    return generate(env.model, **{"prompt_ids": ids(2, 3), "max_new_tokens": 2, **kwargs})


NAN, INF = math.nan, math.inf
CASES = [
    # create_model: config values that pass a naive check but are nonsense
    ("vocab_size=0", lambda e: other(vocab_size=0), ValueError, ["vocab_size"]),
    (
        "vocab_size=10**12",
        lambda e: other(vocab_size=10**12),
        ValueError,
        ["vocab_size", "16777216"],
    ),
    ("vocab_size=2.5", lambda e: other(vocab_size=2.5), ValueError, ["vocab_size"]),
    ("dim='64'", lambda e: other(dim="64"), ValueError, ["dim"]),
    ("depth=True", lambda e: other(depth=True), ValueError, ["depth"]),
    ("num_heads=3", lambda e: other(num_heads=3), ValueError, ["num_heads"]),
    ("window=0", lambda e: other(window=0), ValueError, ["window"]),
    ("num_persistent=-1", lambda e: other(num_persistent=-1), ValueError, ["num_persistent"]),
    ("ffn_expansion=inf", lambda e: other(ffn_expansion=INF), ValueError, ["ffn_expansion"]),
    ("ffn_expansion=nan", lambda e: other(ffn_expansion=NAN), ValueError, ["ffn_expansion"]),
    ("ffn_expansion=0.001", lambda e: other(ffn_expansion=0.001), ValueError, ["ffn_expansion"]),
    ("tie_embeddings='no'", lambda e: other(tie_embeddings="no"), ValueError, ["tie_embeddings"]),
    ("tie_embeddings=1", lambda e: other(tie_embeddings=1), ValueError, ["tie_embeddings"]),
    ("norm_eps=inf", lambda e: other(norm_eps=INF), ValueError, ["norm_eps"]),
    ("norm_eps=nan", lambda e: other(norm_eps=NAN), ValueError, ["norm_eps"]),
    ("norm_eps=0", lambda e: other(norm_eps=0.0), ValueError, ["norm_eps"]),
    ("rope_base=nan", lambda e: other(rope_base=NAN), ValueError, ["rope_base"]),
    ("chunk_size=1.5", lambda e: other(chunk_size=1.5), ValueError, ["chunk_size"]),
    ("omega_window=0", lambda e: other(omega_window=0), ValueError, ["omega_window"]),
    ("omega_gate_source=x", lambda e: other(omega_gate_source="x"), ValueError, ["omega_gate"]),
    ("update_rule=True", lambda e: other(update_rule=True), ValueError, ["update_rule"]),
    ("muon=True", lambda e: other(muon=True), ValueError, ["muon", "update_rule"]),
    ("impl='chunk'", lambda e: other(impl="chunk"), ValueError, ["impl", "set_runtime"]),
    ("init_lr=nan", lambda e: other(init_lr=NAN), ValueError, ["init_lr"]),
    ("lr_max=inf", lambda e: other(lr_max=INF), ValueError, ["lr_max"]),
    ("residual='no'", lambda e: other(residual="no"), ValueError, ["residual"]),
    ("memory='mlp'", lambda e: other(memory="mlp"), ValueError, ["memory"]),
    ("unknown-model", lambda e: other("gpt"), ValueError, ["gpt", "available"]),
    ("unknown-preset", lambda e: ta.create_model("mac", "9000b"), ValueError, ["9000b"]),
    ("model-name-list", lambda e: ta.create_model(["mac"]), ValueError, ["unknown model", "mac"]),
    ("preset-list", lambda e: ta.create_model("mac", ["debug"]), ValueError, ["unknown preset"]),
    ("unknown-field", lambda e: other(bogus=1), ValueError, ["bogus"]),
    ("name=5", lambda e: ta.ModelConfig(name=5), ValueError, ["name"]),
    ("build-from-a-dict", lambda e: build_model({"name": "mag"}), ValueError, ["ModelConfig"]),
    # set_runtime
    (
        "memory_impl='fast'",
        lambda e: e.model.set_runtime(memory_impl="fast"),
        ValueError,
        ["memory_impl"],
    ),
    (
        "memory_checkpoint=1",
        lambda e: e.model.set_runtime(memory_checkpoint=1),
        ValueError,
        ["memory_checkpoint"],
    ),
    ("validate='no'", lambda e: e.model.set_runtime(validate="no"), ValueError, ["validate"]),
    # forward: token ids
    ("ids-float", lambda e: e.model(ids(2, 3).float()), ValueError, ["input_ids", "float32"]),
    ("ids-bool", lambda e: e.model(ids(2, 3) > 9), ValueError, ["input_ids", "bool"]),
    ("ids-1d", lambda e: e.model(ids(3)), ValueError, ["input_ids", "[B, T]"]),
    ("ids-3d", lambda e: e.model(ids(1, 2, 3)), ValueError, ["input_ids", "[B, T]"]),
    ("ids-list", lambda e: e.model([[1, 2]]), ValueError, ["input_ids", "list"]),
    (
        "ids>=vocab",
        lambda e: e.model(torch.tensor([[1, VOCAB]])),
        ValueError,
        ["input_ids", f"[0, {VOCAB})"],
    ),
    ("ids<0", lambda e: e.model(torch.tensor([[-1, 2]])), ValueError, ["input_ids", "-1"]),
    (
        "ids-uint8>=vocab",
        lambda e: e.model(torch.tensor([[200]], dtype=torch.uint8)),
        ValueError,
        ["input_ids", "200"],
    ),
    (
        "ids-int16<0",
        lambda e: e.model(torch.tensor([[-3]], dtype=torch.int16)),
        ValueError,
        ["input_ids", "-3"],
    ),
    ("last_only='yes'", lambda e: e.model(ids(2, 3), last_only="yes"), ValueError, ["last_only"]),
    # forward: states
    (
        "state-dict",
        lambda e: e.model(ids(2, 3), {"position": 7}),
        ValueError,
        ["state", "ModelState"],
    ),
    (
        "state-other-architecture",
        lambda e: e.model(ids(2, 3), state_of(other("mag"))),
        ValueError,
        ["name='mag'"],
    ),
    (
        "state-other-dim",
        lambda e: e.model(ids(2, 3), state_of(other(dim=32))),
        ValueError,
        ["dim=32"],
    ),
    (
        "state-other-window",
        lambda e: e.model(ids(2, 3), state_of(other(window=8))),
        ValueError,
        ["window=8"],
    ),
    (
        "state-other-chunk",
        lambda e: e.model(ids(2, 3), state_of(other(chunk_size=5))),
        ValueError,
        ["memory.chunk_size=5"],
    ),
    (
        "state-negative-position",
        lambda e: e.model(ids(2, 3), replace(e.state, position=-4)),
        ValueError,
        ["position", "-4"],
    ),
    (
        "state-edited-position",
        lambda e: e.model(ids(2, 3), replace(e.state, position=2)),
        ValueError,
        ["position", "edited"],
    ),
    ("state-other-batch", lambda e: e.model(ids(3, 3), e.state), ValueError, ["batch 2", "3"]),
    (
        "state-missing-block",
        lambda e: e.model(ids(2, 3), replace(e.state, blocks=e.state.blocks[:1])),
        ValueError,
        ["state.blocks"],
    ),
    (
        "state-incomplete-block",
        lambda e: e.model(
            ids(2, 3), replace(e.state, blocks=[replace(b, attn=None) for b in e.state.blocks])
        ),
        ValueError,
        ["incomplete"],
    ),
    ("state.to(int64)", lambda e: e.state.to(torch.int64), ValueError, ["floating"]),
    # generate: typed sampling options
    ("temperature=nan", lambda e: gen(e, temperature=NAN), ValueError, ["temperature"]),
    ("temperature=inf", lambda e: gen(e, temperature=INF), ValueError, ["temperature"]),
    ("temperature=-0.1", lambda e: gen(e, temperature=-0.1), ValueError, ["temperature"]),
    ("temperature='1'", lambda e: gen(e, temperature="1"), ValueError, ["temperature"]),
    (
        "repetition_penalty=nan",
        lambda e: gen(e, repetition_penalty=NAN),
        ValueError,
        ["repetition_penalty"],
    ),
    (
        "repetition_penalty=0",
        lambda e: gen(e, repetition_penalty=0.0),
        ValueError,
        ["repetition_penalty"],
    ),
    ("top_k=2.5", lambda e: gen(e, top_k=2.5), ValueError, ["top_k"]),
    ("top_k=True", lambda e: gen(e, top_k=True), ValueError, ["top_k"]),
    ("top_k=0", lambda e: gen(e, top_k=0), ValueError, ["top_k"]),
    ("top_p=nan", lambda e: gen(e, top_p=NAN), ValueError, ["top_p"]),
    ("top_p=1.5", lambda e: gen(e, top_p=1.5), ValueError, ["top_p"]),
    ("min_p=1", lambda e: gen(e, min_p=1.0), ValueError, ["min_p"]),
    ("stop_tokens=5", lambda e: gen(e, stop_tokens=5), ValueError, ["stop_tokens"]),
    ("stop_tokens='a'", lambda e: gen(e, stop_tokens="a"), ValueError, ["stop_tokens"]),
    ("stop_tokens=(2.5,)", lambda e: gen(e, stop_tokens=(2.5,)), ValueError, ["stop_tokens"]),
    ("stop_tokens=(vocab,)", lambda e: gen(e, stop_tokens=(VOCAB,)), ValueError, ["stop_tokens"]),
    ("seed='abc'", lambda e: gen(e, seed="abc"), ValueError, ["seed"]),
    ("seed=-1", lambda e: gen(e, seed=-1), ValueError, ["seed"]),
    ("max_new_tokens=True", lambda e: gen(e, max_new_tokens=True), ValueError, ["max_new_tokens"]),
    ("max_new_tokens=2.5", lambda e: gen(e, max_new_tokens=2.5), ValueError, ["max_new_tokens"]),
    ("max_new_tokens=-1", lambda e: gen(e, max_new_tokens=-1), ValueError, ["max_new_tokens"]),
    ("pad_token=vocab", lambda e: gen(e, pad_token=VOCAB), ValueError, ["pad_token"]),
    ("greedy='yes'", lambda e: gen(e, greedy="yes"), ValueError, ["greedy"]),
    ("compile='yes'", lambda e: gen(e, compile="yes"), ValueError, ["compile"]),
    ("prompt-empty", lambda e: gen(e, prompt_ids=ids(2, 0)), ValueError, ["prompt_ids"]),
    ("prompt-float", lambda e: gen(e, prompt_ids=ids(2, 3).double()), ValueError, ["prompt_ids"]),
    (
        "prompt-uint8>=vocab",
        lambda e: gen(e, prompt_ids=torch.full((1, 2), 255, dtype=torch.uint8)),
        ValueError,
        ["prompt_ids", "255"],
    ),
    (
        "generate-not-a-model",
        lambda e: generate(torch.nn.Linear(2, 2), ids(2, 3), 2),
        ValueError,
        ["model", "Linear"],
    ),
    ("SamplingConfig-nan", lambda e: SamplingConfig(temperature=NAN), ValueError, ["temperature"]),
    # prefill / decode_one_token
    ("prefill-float", lambda e: prefill(e.model, ids(2, 3).float()), ValueError, ["prompt_ids"]),
    (
        "prefill-state-other-window",
        lambda e: prefill(e.model, ids(2, 3), state_of(other(window=8))),
        ValueError,
        ["window=8"],
    ),
    (
        "decode-token-3d",
        lambda e: decode_one_token(e.model, ids(2, 1, 1), e.state, lambda x: x.argmax(-1)),
        ValueError,
        ["token"],
    ),
    (
        "decode-token-float",
        lambda e: decode_one_token(e.model, ids(2).float(), e.state, lambda x: x.argmax(-1)),
        ValueError,
        ["input_ids", "float"],
    ),
    (
        "decode-token>=vocab",
        lambda e: decode_one_token(
            e.model, torch.tensor([VOCAB, 1]), e.state, lambda x: x.argmax(-1)
        ),
        ValueError,
        ["input_ids", f"[0, {VOCAB})"],
    ),
    (
        "decode-sampler",
        lambda e: decode_one_token(e.model, ids(2), e.state, "greedy"),
        ValueError,
        ["sampler"],
    ),
    (
        "decode-state-other-batch",
        lambda e: decode_one_token(e.model, ids(3), e.state, lambda x: x.argmax(-1)),
        ValueError,
        ["batch"],
    ),
    # load_model / save_pretrained
    ("load-directory=5", lambda e: ta.load_model(5), ValueError, ["directory"]),
    (
        "load-device",
        lambda e: ta.load_model(e.saved, device="gpu9"),
        ValueError,
        ["device", "gpu9"],
    ),
    ("load-dtype-int", lambda e: ta.load_model(e.saved, dtype=torch.int64), ValueError, ["dtype"]),
    (
        "config-not-an-object",
        lambda e: ta.load_model(config_edit(e, lambda m: m.update(config=[1]))),
        CheckpointError,
        ["config", "object"],
    ),
    (
        "config-missing-dim",
        lambda e: ta.load_model(config_edit(e, lambda m: m["config"].pop("dim"))),
        CheckpointError,
        ["missing", "dim"],
    ),
    (
        "config-missing-memory-key",
        lambda e: ta.load_model(config_edit(e, lambda m: m["config"]["memory"].pop("chunk_size"))),
        CheckpointError,
        ["missing", "chunk_size"],
    ),
    (
        "config-version-10",
        lambda e: ta.load_model(config_edit(e, lambda m: m.update(version=10))),
        CheckpointError,
        ["version", "10"],
    ),
    (
        "config-v1-bad-muon",
        lambda e: ta.load_model(
            config_edit(
                e, lambda m: m.update(version=1) or m["config"]["memory"].update(muon="sometimes")
            )
        ),
        CheckpointError,
        ["muon", "sometimes"],
    ),
    (
        "config-tie='no'",
        lambda e: ta.load_model(config_edit(e, lambda m: m["config"].update(tie_embeddings="no"))),
        CheckpointError,
        ["tie_embeddings"],
    ),
    (
        "weights-nan",
        lambda e: ta.load_model(weights_edit(e, lambda t: t[first_weight(t)].fill_(NAN))),
        CheckpointError,
        ["NaN", "blocks"],
    ),
    (
        "weights-int",
        lambda e: ta.load_model(weights_edit(e, lambda t: t.update(embed_weight_int(t)))),
        CheckpointError,
        ["embed.weight", "int64"],
    ),
    (
        "weights-shape",
        lambda e: ta.load_model(
            weights_edit(e, lambda t: t.update({"norm.weight": torch.ones(3)}))
        ),
        CheckpointError,
        ["norm.weight", "[3]"],
    ),
    ("save-directory=5", lambda e: e.model.save_pretrained(5), ValueError, ["directory"]),
    (
        "save-nan-model",
        lambda e: nan_model().save_pretrained(e.tmp.mktemp("nan")),
        ValueError,
        ["NaN", "norm.weight"],
    ),
]


def embed_weight_int(tensors: dict) -> dict:
    return {"embed.weight": tensors["embed.weight"].long()}


def nan_model() -> ta.LanguageModel:
    model = other("lmm")
    with torch.no_grad():
        model.norm.weight.fill_(NAN)
    return model


@pytest.mark.parametrize(
    ("call", "error", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_refused_with_a_message_that_names_it(env, call, error, words):
    with pytest.raises(ValueError) as info:
        call(env)
    assert isinstance(info.value, error), (
        f"raised {type(info.value).__name__}, not {error.__name__}"
    )
    message = str(info.value)
    missing = [w for w in words if w not in message]
    assert not missing, f"message {message!r} lacks {missing}"


def test_the_table_covers_every_entry_point():
    text = " ".join(c[0] for c in CASES)
    for entry in (
        "vocab_size",
        "ids",
        "state",
        "temperature",
        "prefill",
        "decode",
        "load",
        "save",
        "config",
        "weights",
    ):
        assert entry in text


# ---------------------------------------------------------------------------------------------
# The accepted side of the same boundaries: narrow id dtypes work, and are compared in int64.


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32])
def test_narrow_integer_ids_give_the_int64_logits(env, dtype):
    with torch.no_grad():
        expected, _ = env.model(ids(2, 5))
        actual, _ = env.model(ids(2, 5, dtype=dtype))
    assert torch.equal(actual, expected)


def test_uint8_ids_up_to_255_are_valid_for_a_byte_vocabulary():
    model = ta.create_model("swa", **{**TINY, "vocab_size": 256})
    logits, _ = model(torch.tensor([[0, 128, 255]], dtype=torch.uint8))
    assert logits.shape == (1, 3, 256)
    assert generate(model, torch.tensor([[255]], dtype=torch.uint8), 2, seed=0).shape == (1, 3)


def test_validate_off_skips_only_the_value_check(env):
    model = other("swa").set_runtime(validate=False)
    model(torch.tensor([[VOCAB - 1]]))  # valid ids still run
    with pytest.raises(ValueError, match="input_ids"):
        model(ids(2, 3).float())  # types are still checked: they cost nothing
    model.set_runtime(validate=True)


def test_state_to_a_dtype_casts_floats_and_keeps_integer_positions(env):
    half = env.state.to(torch.float16)
    dtypes = {t.dtype for t in tensors_in(half)}
    assert torch.float16 in dtypes and torch.int64 in dtypes and torch.float32 not in dtypes
    assert half.position == env.state.position


def tensors_in(obj) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    map_tensors(obj, found.append)
    return found


# ---------------------------------------------------------------------------------------------
# A failed call leaves a valid state exactly as it was, and the stream continues from it.

FAILING_CALLS_WITH_A_STATE = {
    "ids>=vocab": lambda m, s: m(torch.tensor([[1, VOCAB], [2, 3]]), s),
    "wrong-batch": lambda m, s: m(ids(3, 2), s),
    "float-ids": lambda m, s: m(ids(2, 2).float(), s),
    "prefill-empty": lambda m, s: prefill(m, ids(2, 0), s),
    "decode-bad-sampler": lambda m, s: decode_one_token(m, ids(2), s, None),
    "decode-token>=vocab": lambda m, s: decode_one_token(
        m, torch.tensor([0, VOCAB]), s, Sampler(SamplingConfig(greedy=True), ids(2, 1), VOCAB)
    ),
}


@pytest.mark.parametrize("name", ta.list_models())
def test_a_failed_call_never_mutates_a_valid_state(name):
    torch.manual_seed(0)
    model = ta.create_model(name, **TINY)
    with torch.no_grad():
        _, state = model(ids(2, 7))  # mid-segment and mid-chunk
        frozen = map_tensors(state, lambda t: t.clone())
        expected, _ = model(ids(2, 4), frozen)
        for label, call in FAILING_CALLS_WITH_A_STATE.items():
            with pytest.raises(ValueError):
                call(model, state)
            after = tensors_in(state)
            assert len(after) == len(tensors_in(frozen)), label
            assert all(torch.equal(a, b) for a, b in zip(after, tensors_in(frozen))), label
            assert state.position == frozen.position, label
        actual, _ = model(ids(2, 4), state)
    assert torch.equal(actual, expected), f"{name}: the stream changed after failed calls"
