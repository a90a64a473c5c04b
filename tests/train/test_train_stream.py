"""Long-stream training: a row's state continues its own stream, a reset row starts a fresh
one exactly, and stream states survive a file round trip."""

import pytest
import torch

import titans_atlas as ta
from titans_atlas.io.state import load_state, save_state
from titans_atlas.models.rows import check_stream_alignment
from titans_atlas.train import replace_rows, reset_rows

SMALL = {"vocab_size": 64, "dim": 32, "depth": 2, "num_heads": 2, "window": 8, "chunk_size": 8}


def _model(name: str):
    return ta.create_model(name, num_persistent=2, **SMALL).double().eval()


@pytest.mark.parametrize("name", ["lmm", "mac", "mag", "atlas", "swa"])
def test_carried_state_continues_the_stream(name):
    """Windows fed one after another with the state carried (and detached, as in training)
    give the logits of one call over the whole stream."""
    model, ids = _model(name), torch.randint(0, 64, (2, 48))
    whole, _ = model(ids)
    state, pieces = None, []
    for start in range(0, 48, 16):
        logits, state = model(ids[:, start : start + 16], state)
        state = state.detach()
        pieces.append(logits)
    torch.testing.assert_close(torch.cat(pieces, 1), whole, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["lmm", "atlas", "omeganet", "atlas++"])
def test_reset_row_starts_a_fresh_stream_exactly(name):
    """Row 1 is reset at an aligned window start: it then gives the logits (and initial-weight
    gradients) of a fresh single-row stream; row 0 continues untouched."""
    model, ids = _model(name), torch.randint(0, 64, (2, 32))
    new_doc = torch.randint(0, 64, (1, 16))
    _, state = model(ids[:, :16])
    state = state.detach()
    mixed = reset_rows(model, state, torch.tensor([False, True]))
    batch = torch.cat([ids[:1, 16:], new_doc])
    logits, _ = model(batch, mixed)
    kept, _ = model(ids[:1, 16:], _row(state, 0))
    fresh, _ = model(new_doc)
    torch.testing.assert_close(logits[:1], kept, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(logits[1:], fresh, rtol=1e-9, atol=1e-9)
    grad = torch.autograd.grad(logits[1].sum(), list(model.parameters()), allow_unused=True)
    grad_fresh = torch.autograd.grad(fresh.sum(), list(model.parameters()), allow_unused=True)
    for a, b in zip(grad, grad_fresh):
        if a is not None or b is not None:
            torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", ["mac", "mag", "mal", "atlas-mag"])
def test_reset_row_memory_holds_fresh_values(name):
    """With attention the logits also depend on the absolute position (persistent keys have
    none), so check the reset memory itself: initial weights, zero momentum and caches."""
    model = _model(name)
    _, state = model(torch.randint(0, 64, (2, 16)))
    mixed = reset_rows(model, state.detach(), torch.tensor([False, True]))
    for block, before, after in zip(model.blocks, state.blocks, mixed.blocks):
        memory, old = after["memory"].memory, before["memory"].memory
        for key, weight in block.memory.initial_weights.items():
            torch.testing.assert_close(memory.weights[key][1], weight, rtol=0, atol=0)
            assert torch.equal(memory.weights[key][0], old.weights[key][0])
            assert not memory.momentum[key][1].any()
        layer_after, layer_before = after["memory"], before["memory"]
        for name in ("conv_q", "conv_k", "conv_v"):
            cache, old_cache = getattr(layer_after, name), getattr(layer_before, name)
            assert not cache[1].any(), name
            assert torch.equal(cache[0], old_cache[0]), name


def _row(state, b):
    from titans_atlas.ops.state import map_tensors

    out = map_tensors(state, lambda t: t[b : b + 1] if t.ndim and t.shape[0] == 2 else t)
    out.batch_size = 1
    return out


def test_replace_rows_takes_exactly_the_flagged_rows():
    model = _model("mag")
    _, a = model(torch.randint(0, 64, (3, 10)))
    _, b = model(torch.randint(0, 64, (3, 10)))
    mixed = replace_rows(a, b, torch.tensor([True, False, True]))
    leaves = []
    from titans_atlas.ops.state import map_tensors

    map_tensors((mixed, a, b), lambda t: leaves.append(t))
    n = len(leaves) // 3
    for m, x, y in zip(leaves[:n], leaves[n : 2 * n], leaves[2 * n :]):
        if m.shape[0] == 3:
            assert torch.equal(m[0], y[0]) and torch.equal(m[1], x[1]) and torch.equal(m[2], y[2])
    with pytest.raises(ValueError, match="fresh has a dict"):
        replace_rows(a, {"not": "a state"}, torch.tensor([True, False, True]))


def test_all_rows_reset_is_a_fresh_state_and_none_is_a_no_op():
    model = _model("lmm")
    _, state = model(torch.randint(0, 64, (2, 8)))
    assert reset_rows(model, state, torch.tensor([True, True])) is None
    assert reset_rows(model, state, torch.tensor([False, False])) is state
    with pytest.raises(ValueError, match="rows"):
        reset_rows(model, state, torch.tensor([True]))


def test_stream_mode_checks_window_alignment():
    check_stream_alignment(_model("lmm"), 16)
    with pytest.raises(ValueError, match="chunk_size"):
        check_stream_alignment(_model("lmm"), 12)
    with pytest.raises(ValueError, match="packed"):
        check_stream_alignment(_model("transformer"), 16)


@pytest.mark.parametrize("name", ["mac", "atlas", "swa"])
def test_state_file_round_trip_continues_identically(name, tmp_path):
    model, ids = _model(name), torch.randint(0, 64, (1, 30))
    _, state = model(ids[:, :19])
    save_state(state, tmp_path / "s.safetensors", {"model": name})
    loaded, meta = load_state(tmp_path / "s.safetensors")
    assert meta == {"model": name}
    torch.testing.assert_close(model(ids[:, 19:], loaded)[0], model(ids[:, 19:], state)[0])


def test_state_file_refuses_foreign_classes(tmp_path):
    import json

    from safetensors.torch import save_file

    structure = {"dataclass": "os:system", "fields": {}}
    save_file(
        {},
        str(tmp_path / "s.safetensors"),
        {"format": "titans-atlas-state", "structure": json.dumps(structure)},
    )
    with pytest.raises(ValueError, match="outside titans_atlas"):
        load_state(tmp_path / "s.safetensors")
