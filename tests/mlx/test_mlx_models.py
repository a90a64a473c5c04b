"""Every registered model on MLX: logits from the same checkpoint equal torch's (float32,
max |diff| <= 1e-4 x max(1, max |logit|)); checkpoints travel both ways with the same names
and config; any split of a stream equals one call; gradients of a training loss equal
torch's; bad input and bad checkpoints are clear errors."""

import pytest

mx = pytest.importorskip("mlx.core")

import json

import mlx.nn as nn
import numpy as np
import torch
import torch.nn.functional as F
from mlx.utils import tree_flatten

import titans_atlas as ta
import titans_atlas.mlx as tam
from mlx_helpers import RTOL_F32, assert_close, to_mx
from titans_atlas.io import CheckpointError

VOCAB, WINDOW, CHUNK = 50, 4, 3
TINY = {"vocab_size": VOCAB, "dim": 16, "depth": 2, "num_heads": 2, "window": WINDOW}
MODELS = ta.list_models()


def torch_model(name: str, **overrides) -> ta.LanguageModel:
    torch.manual_seed(0)
    return ta.create_model(name, **{**TINY, "chunk_size": CHUNK, **overrides})


def tokens(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """name -> (torch model, its checkpoint directory)."""
    root = tmp_path_factory.mktemp("torch-checkpoints")
    saved = {}
    for name in MODELS:
        model = torch_model(name)
        model.save_pretrained(str(root / name))
        saved[name] = (model, root / name)
    return saved


def test_every_registered_model_has_an_mlx_twin():
    assert sorted(tam.list_models()) == sorted(ta.list_models())


@pytest.mark.parametrize("name", MODELS)
def test_logits_match_torch(name, checkpoints):
    model, directory = checkpoints[name]
    ids = tokens(2, 23)  # crosses chunk (3), window / segment (4) and Omega (8) boundaries
    with torch.no_grad():
        expected, _ = model(ids)
    actual, state = tam.load_model(directory)(to_mx(ids))
    assert actual.dtype == mx.float32 and state.position == 23
    assert_close(actual, expected, RTOL_F32, f"{name} logits")


def test_untied_head_and_no_persistent_tokens_load(tmp_path):
    model = torch_model("mag", tie_embeddings=False, num_persistent=0)
    model.save_pretrained(str(tmp_path))
    ids = tokens(1, 9)
    with torch.no_grad():
        expected, _ = model(ids)
    assert_close(tam.load_model(tmp_path)(to_mx(ids))[0], expected, RTOL_F32, "logits")


@pytest.mark.parametrize("name, option", [("mag", "mag_gate"), ("mac", "mac_gate")])
def test_attention_gate_matches_torch(tmp_path, name, option):
    """MAG's ``mag_gate="attention"`` and MAC's ``mac_gate="attention"``: the gain set away
    from its zero start so both branches reach the logits, and a fresh MLX model starts with
    the same zero gain."""
    model = torch_model(name, **{option: "attention"})
    with torch.no_grad():
        for block in model.blocks:
            block.gate.norm_y.weight.uniform_(-1.0, 1.0)
    model.save_pretrained(str(tmp_path))
    ids = tokens(1, 11)
    with torch.no_grad():
        expected, _ = model(ids)
    assert_close(tam.load_model(tmp_path)(to_mx(ids))[0], expected, RTOL_F32, "logits")
    fresh = tam.create_model(name, **TINY, **{option: "attention"})
    assert all(float(mx.abs(b.gate.norm_y.weight).max()) == 0.0 for b in fresh.blocks)


@pytest.mark.parametrize(
    "stability",
    [
        {"decay_target": "init", "max_grad_norm": 0.05},  # the clip binds on most tokens
        {"momentum_max": 1.0, "decay_min": 0.0, "max_grad_norm": None},  # format-2 layers
        {"omega_gate_source": "step"},  # the layer default; the ATLAS presets take "tap"
        {"timescale_ratio": 64.0},  # per-head theta and alpha, scaled down to 1/64
        {"timescale_ratio": 64.0, "timescale_lr_ratio": 8.0},  # theta spread on its own
    ],
    ids=[
        "decay-to-init-clip-binds",
        "unbounded",
        "omega-gates-of-the-step",
        "timescales",
        "theta-timescales",
    ],
)
@pytest.mark.parametrize("name", ["lmm", "atlas"])
def test_stability_settings_match_torch(name, stability, tmp_path):
    model = torch_model(name, **stability)
    model.save_pretrained(str(tmp_path))
    ids = tokens(2, 17)
    with torch.no_grad():
        expected, _ = model(ids)
    assert_close(tam.load_model(tmp_path)(to_mx(ids))[0], expected, RTOL_F32, "logits")


@pytest.mark.parametrize("name", MODELS)
def test_mlx_checkpoint_loads_in_torch(name, tmp_path):
    mx.random.seed(0)
    model = tam.create_model(name, **TINY, chunk_size=CHUNK)
    model.save_pretrained(str(tmp_path))
    loaded = ta.load_model(str(tmp_path))
    expected_names = set(loaded.state_dict()) - {"head.weight"}  # tied: stored once
    assert set(dict(tree_flatten(model.parameters()))) == expected_names
    meta = json.loads((tmp_path / "config.json").read_text())
    assert meta["config"] == loaded.config.to_dict()
    ids = tokens(2, 11)
    with torch.no_grad():
        expected, _ = loaded(ids)
    assert_close(model(to_mx(ids))[0], expected, RTOL_F32, f"{name} logits")


def test_pieces_equal_one_call_with_omega_gates_of_the_step(tmp_path):
    torch_model("omeganet", omega_gate_source="step").save_pretrained(str(tmp_path))
    assert_pieces_equal_one_call(tam.load_model(tmp_path), "omeganet, gates of the step")


def test_feature_projection_starts_as_torch_s_does():
    """Identity on phi's degree-1 block plus N(0, 0.02) noise (torch's init_feature_projection)."""
    mx.random.seed(0)
    layer = tam.create_model("atlas", **TINY, chunk_size=CHUNK).blocks[0].memory
    weight = np.array(layer.feature_projection.weight)
    head_dim = weight.shape[0]
    noise = weight.copy()
    noise[:, 1 : 1 + head_dim] -= np.eye(head_dim)
    assert abs(noise.std() - 0.02) < 0.004 and np.abs(noise).max() < 0.15


@pytest.mark.parametrize("name", MODELS)
def test_pieces_equal_one_call(name, checkpoints):
    assert_pieces_equal_one_call(tam.load_model(checkpoints[name][1]), name)


def assert_pieces_equal_one_call(model, name: str) -> None:
    ids = to_mx(tokens(2, 14))
    whole, _ = model(ids)
    for lengths in ([5, 1, 8], [1] * 14):
        state, pieces, start = None, [], 0
        for length in lengths:
            logits, state = model(ids[:, start : start + length], state)
            pieces.append(logits)
            start += length
        assert state.position == 14
        assert_close(mx.concatenate(pieces, axis=1), whole, 1e-4, f"{name} {lengths}")


def test_runtime_choices_give_the_same_logits(checkpoints):
    model = tam.load_model(checkpoints["atlas"][1])
    ids = to_mx(tokens(2, 10))
    chunked, _ = model.set_runtime(memory_impl="chunk")(ids)
    looped, _ = model.set_runtime(memory_impl="reference", compiled=False)(ids)
    model.set_runtime()
    assert_close(looped, chunked, 1e-5, "reference vs chunk")
    with pytest.raises(ValueError, match="memory_impl"):
        model.set_runtime(memory_impl="fast")


@pytest.mark.parametrize("name", ["mac", "atlas-mag"])
def test_training_gradients_match_torch(name, checkpoints):
    torch_lm, directory = checkpoints[name]
    ids = tokens(2, 13)
    logits, _ = torch_lm(ids[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    torch_lm.zero_grad()
    loss.backward()
    expected = {n: p.grad for n, p in torch_lm.named_parameters()}

    model, ids_mx = tam.load_model(directory), to_mx(ids)

    def mlx_loss(model):
        logits, _ = model(ids_mx[:, :-1])
        return nn.losses.cross_entropy(logits, ids_mx[:, 1:]).mean()

    value, grads = nn.value_and_grad(model, mlx_loss)(model)
    assert abs(value.item() - loss.item()) < 1e-5
    for param_name, grad in tree_flatten(grads):
        assert_close(grad, expected[param_name], 1e-4, param_name)


def test_bad_input_and_state_are_value_errors(checkpoints):
    model = tam.load_model(checkpoints["lmm"][1])
    with pytest.raises(ValueError, match="input_ids"):
        model(mx.array([[0.5, 1.0]]))
    with pytest.raises(ValueError, match="input_ids must lie"):
        model(mx.array([[VOCAB]]))
    _, state = model(mx.array([[1, 2]]))
    with pytest.raises(ValueError, match="batch"):
        model(mx.array([[1], [2]]), state)
    other = tam.load_model(checkpoints["mag"][1])
    with pytest.raises(ValueError, match="ModelState"):
        other(mx.array([[1]]), state)


def test_state_detach_and_size(checkpoints):
    model = tam.load_model(checkpoints["mac"][1])
    _, state = model(to_mx(tokens(1, 7)))
    detached = state.detach()
    assert detached.position == state.position and detached.nbytes() == state.nbytes() > 0


def test_bad_checkpoints_are_checkpoint_errors(checkpoints, tmp_path):
    with pytest.raises(CheckpointError, match="missing"):
        tam.load_model(tmp_path)
    _, directory = checkpoints["lmm"]
    meta = json.loads((directory / "config.json").read_text())
    meta["config"]["dim"] = 32
    (tmp_path / "config.json").write_text(json.dumps(meta))
    (tmp_path / "model.safetensors").write_bytes((directory / "model.safetensors").read_bytes())
    with pytest.raises(CheckpointError, match="shape"):
        tam.load_model(tmp_path)
    meta["config"].update(dim=16, name="mag")
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="holds a 'lmm' model"):
        tam.load_model(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="JSON"):
        tam.load_model(tmp_path)


def test_loaded_weights_are_the_saved_ones(checkpoints):
    torch_lm, directory = checkpoints["atlas++"]
    params = dict(tree_flatten(tam.load_model(directory).parameters()))
    for name, tensor in torch_lm.state_dict().items():
        if name in params:
            assert np.array_equal(np.array(params[name]), tensor.numpy()), name


def kv_cache_lengths(obj) -> list[int]:
    """Cached key counts of every KV cache in a (torch or MLX) model state, in order."""
    if hasattr(obj, "keys") and hasattr(obj, "positions"):
        return [obj.keys.shape[2]]
    if hasattr(obj, "__dataclass_fields__"):
        obj = [getattr(obj, name) for name in obj.__dataclass_fields__]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, list | tuple):
        return [n for value in obj for n in kv_cache_lengths(value)]
    return []


@pytest.mark.parametrize("name", ["swa", "mac", "mag", "transformer"])
def test_kv_caches_keep_what_torch_keeps(name, checkpoints):
    model, directory = checkpoints[name]
    ids = tokens(1, 11)
    with torch.no_grad():
        _, expected = model(ids)
    _, state = tam.load_model(directory)(to_mx(ids))
    assert kv_cache_lengths(state) == kv_cache_lengths(expected) != []
