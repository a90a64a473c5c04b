"""The six properties every architecture must have (docs/architectures.md, "Properties").

Every test is parametrized over ``ta.list_models()``, so a newly registered architecture is
covered without touching this file. Models are tiny (width 16, two blocks, two heads) and the
geometry is chosen so boundaries never line up: attention window / MAC segment W = 4, memory
chunk C = 3 (and the ATLAS presets keep their Omega window of 8, wider than a chunk).
"""

from __future__ import annotations

import pytest
import torch

import titans_atlas as ta
from titans_atlas.ops.state import map_tensors

VOCAB, WINDOW, CHUNK = 50, 4, 3
TINY = {"vocab_size": VOCAB, "dim": 16, "depth": 2, "num_heads": 2, "window": WINDOW}
MODELS = ta.list_models()
# Architectures without a memory, and what token 0 does to positions beyond 2 x window: SWA
# cannot reach them; the Transformer (exempt from property 5) reaches them by full attention.
MEMORYLESS = {"swa": "unreachable", "transformer": "reaches"}
STREAM_TOLERANCE = 1e-4  # fp32, docs/architectures.md property 3


def tiny(name: str, **overrides) -> ta.LanguageModel:
    torch.manual_seed(0)
    return ta.create_model(name, **{**TINY, "chunk_size": CHUNK, **overrides})


def tokens(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def perturbed(ids: torch.Tensor, position: int, sample: int | None = None) -> torch.Tensor:
    """``ids`` with a different token at ``position`` (in one sample, or in all)."""
    out = ids.clone()
    rows = slice(None) if sample is None else sample
    out[rows, position] = (out[rows, position] + 17) % VOCAB
    assert not torch.equal(out, ids)
    return out


def run_in_pieces(model, ids: torch.Tensor, lengths: list[int], state=None):
    """Feed ``ids`` through ``model`` in consecutive pieces of the given lengths."""
    assert sum(lengths) == ids.shape[1], lengths
    outputs, start = [], 0
    for length in lengths:
        logits, state = model(ids[:, start : start + length], state=state)
        assert logits.shape == (ids.shape[0], length, VOCAB)
        outputs.append(logits)
        start += length
    return torch.cat(outputs, dim=1), state


def has_memory(model: torch.nn.Module) -> bool:
    return any(isinstance(m, ta.NeuralMemory) for m in model.modules())


def tensors_in(obj) -> list[torch.Tensor]:
    """Every tensor of a state object, in a fixed walk order (ops.state.map_tensors)."""
    found: list[torch.Tensor] = []
    map_tensors(obj, found.append)
    return found


def snapshot(obj):
    """A deep, detached copy of a state object."""
    return map_tensors(obj, lambda t: t.detach().clone())


def differences(before, after) -> list[str]:
    """How two states differ: structure (types, fields, ints, shapes, dtypes), or values."""
    skeleton = lambda t: (tuple(t.shape), t.dtype)  # noqa: E731
    if map_tensors(before, skeleton) != map_tensors(after, skeleton):
        return [f"structure changed: {map_tensors(before, skeleton)!r:.300}"]
    return [
        f"tensor {i} {list(b.shape)}: values changed by up to {(b - a).abs().max().item():.3e}"
        for i, (b, a) in enumerate(zip(tensors_in(before), tensors_in(after)))
        if not torch.equal(b, a)
    ]


def state_numel(obj) -> int:
    """Total number of tensor elements held in a state object."""
    return sum(t.numel() for t in tensors_in(obj))


# ---------------------------------------------------------------------------------------------
# 1. Causal: changing token t changes no output at a position < t (exactly).

CAUSAL_POSITIONS = [1, 5, 8, 9, 15]  # mid-chunk/mid-segment, segment start, chunk start, last


@pytest.mark.parametrize("name", MODELS)
def test_causal_changing_token_t_leaves_earlier_outputs_identical(name):
    model = tiny(name)
    ids = tokens(2, 16)
    with torch.no_grad():
        base, _ = model(ids)
        for t in CAUSAL_POSITIONS:
            logits, _ = model(perturbed(ids, t))
            leaked = (logits[:, :t] != base[:, :t]).any(dim=(0, 2)).nonzero().flatten().tolist()
            assert not leaked, (
                f"{name}: changing token {t} changed outputs at earlier positions {leaked} "
                f"(max abs diff {(logits[:, :t] - base[:, :t]).abs().max().item():.3e})"
            )
            assert not torch.equal(logits[:, t], base[:, t]), f"{name}: token {t} has no effect"


# ---------------------------------------------------------------------------------------------
# 2. Per-sample: changing sample b changes no output of another sample (exactly).


@pytest.mark.parametrize("name", MODELS)
def test_per_sample_changing_one_sample_leaves_the_other_identical(name):
    model = tiny(name)
    ids = tokens(2, 14)
    other = ids.clone()
    other[1] = tokens(1, 14, seed=7)[0]
    with torch.no_grad():
        base, _ = model(ids)
        logits, _ = model(other)
    assert torch.equal(logits[0], base[0]), (
        f"{name}: changing sample 1 changed sample 0 by up to "
        f"{(logits[0] - base[0]).abs().max().item():.3e}"
    )
    assert not torch.equal(logits[1], base[1])


@pytest.mark.parametrize("name", MODELS)
def test_per_sample_holds_when_streaming_with_a_state(name):
    model = tiny(name)
    ids = tokens(2, 13)
    other = perturbed(perturbed(ids, 2, sample=1), 9, sample=1)
    with torch.no_grad():
        base, _ = run_in_pieces(model, ids, [5, 1, 7])
        logits, _ = run_in_pieces(model, other, [5, 1, 7])
    assert torch.equal(logits[0], base[0]), (
        f"{name}: changing sample 1 changed sample 0 by up to "
        f"{(logits[0] - base[0]).abs().max().item():.3e} when streaming in pieces 5+1+7"
    )


# ---------------------------------------------------------------------------------------------
# 3. Streamable: any split gives the logits of one call (fp32 max abs diff <= 1e-4).
# With W = 4 and C = 3 the boundaries fall at different places; the splits start and end
# inside segments and inside chunks, and token-by-token crosses every boundary.

SPLITS = {
    "token-by-token-23": [1] * 23,
    "7+9+7": [7, 9, 7],
    "1+7+15": [1, 7, 15],
    "5+1+1+2+14": [5, 1, 1, 2, 14],
    "segment-aligned-4x5+3": [4, 4, 4, 4, 4, 3],
    "chunk-aligned-3x7+2": [3, 3, 3, 3, 3, 3, 3, 2],
    "22+1": [22, 1],
    "1+7+55": [1, 7, 55],  # 63 tokens: many segments and chunks inside one call
}


def assert_stream_matches(name, model, ids, lengths, label):
    with torch.no_grad():
        whole, _ = model(ids)
        pieces, state = run_in_pieces(model, ids, lengths)
    per_position = (pieces - whole).abs().amax(dim=(0, 2))
    bad = per_position.gt(STREAM_TOLERANCE).nonzero().flatten().tolist()
    assert not bad, (
        f"{name}: pieces {label} differ from one call by {per_position.max().item():.3e} "
        f"(positions {bad[:8]}{'...' if len(bad) > 8 else ''} exceed {STREAM_TOLERANCE})"
    )
    assert state.position == ids.shape[1]


@pytest.mark.parametrize("split", list(SPLITS), ids=list(SPLITS))
@pytest.mark.parametrize("name", MODELS)
def test_streaming_any_split_equals_one_call(name, split):
    lengths = SPLITS[split]
    assert_stream_matches(name, tiny(name), tokens(2, sum(lengths)), lengths, split)


GEOMETRIES = {
    "chunk-wider-than-window-w3c5": {"window": 3, "chunk_size": 5},
    "chunk-1-w5": {"window": 5, "chunk_size": 1},
    "length-7-w4c4": {"window": 4, "chunk_size": 4},
}
GEOMETRY_SPLITS = {
    "chunk-wider-than-window-w3c5": [2, 1, 6, 1, 1, 8],
    "chunk-1-w5": [1, 3, 1, 7, 2],
    "length-7-w4c4": [3, 1, 3],
}


@pytest.mark.parametrize("geometry", list(GEOMETRIES), ids=list(GEOMETRIES))
@pytest.mark.parametrize("name", MODELS)
def test_streaming_other_window_and_chunk_geometries(name, geometry):
    lengths = GEOMETRY_SPLITS[geometry]
    model = tiny(name, **GEOMETRIES[geometry])
    assert_stream_matches(name, model, tokens(2, sum(lengths)), lengths, f"{lengths} ({geometry})")


@pytest.mark.parametrize("name", MODELS)
def test_streaming_a_single_token_sequence(name):
    """A length-1 stream, continued by another length-1 call, matches one call of length 2."""
    assert_stream_matches(name, tiny(name), tokens(2, 1), [1], "[1] (T = 1)")
    assert_stream_matches(name, tiny(name), tokens(2, 2), [1, 1], "[1, 1] (T = 2)")


@pytest.mark.parametrize("name", MODELS)
def test_streaming_an_empty_piece_changes_nothing(name):
    """A piece of length 0 is a legal (empty) piece: it returns [B, 0, V] and a usable state."""
    model = tiny(name)
    ids = tokens(2, 11)
    with torch.no_grad():
        whole, _ = model(ids)
        first, state = model(ids[:, :6])
        empty, state = model(ids[:, 6:6], state=state)
        rest, state = model(ids[:, 6:], state=state)
    assert empty.shape == (2, 0, VOCAB)
    err = (torch.cat([first, rest], dim=1) - whole).abs().max().item()
    assert err <= STREAM_TOLERANCE, f"{name}: an empty piece shifted the stream by {err:.3e}"


@pytest.mark.parametrize("name", MODELS)
def test_streaming_state_size_does_not_grow_with_the_context(name):
    """Generation cost per token is constant for memory and windowed models: the state after
    14 tokens and after 14 + 24 tokens (same phase modulo window, chunk and Omega window) is
    the same size, whether the tokens came in one call or one at a time. The full-attention
    Transformer's KV cache must grow instead."""
    model = tiny(name)
    with torch.no_grad():
        short = state_numel(model(tokens(2, 14))[1])
        long = state_numel(model(tokens(2, 38))[1])
        _, state = run_in_pieces(model, tokens(2, 38), [14] + [1] * 24)
        stepped = state_numel(state)
    if name == "transformer":
        assert long > short, "transformer: a full-attention KV cache must keep every token"
    else:
        assert short == long == stepped, (
            f"{name}: state holds {short} numbers after 14 tokens, {long} after 38 "
            f"({stepped} after 14 + 24 single-token calls)"
        )


# ---------------------------------------------------------------------------------------------
# 4. Trainable end to end: one backward gives every parameter a finite, non-zero gradient.


@pytest.mark.parametrize("name", MODELS)
def test_one_backward_gives_every_parameter_a_finite_nonzero_gradient(name):
    model = tiny(name)
    ids = tokens(2, 14)
    targets = tokens(2, 14, seed=3)
    logits, _ = model(ids)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
    loss.backward()
    offenders = []
    for pname, param in model.named_parameters():
        grad = param.grad
        if grad is None:
            offenders.append(f"{pname}: no gradient")
        elif not torch.isfinite(grad).all():
            offenders.append(f"{pname}: non-finite gradient")
        elif param.numel() and not grad.abs().max() > 0:
            offenders.append(f"{pname}: zero gradient")
    assert not offenders, f"{name}: {len(offenders)} parameters fail: " + "; ".join(offenders)


# ---------------------------------------------------------------------------------------------
# 5. Memory reaches past attention: changing token 0 changes outputs beyond 2 x window for a
# memory model, and nothing there for SWA (two blocks of window W see back 2(W - 1) tokens).


@pytest.mark.parametrize("name", MODELS)
def test_reach_of_token_zero_beyond_twice_the_window(name):
    model = tiny(name)
    ids = tokens(2, 24)
    with torch.no_grad():
        base, _ = model(ids)
        logits, _ = model(perturbed(ids, 0))
    far = slice(2 * WINDOW + 1, None)  # positions 9..23, beyond twice the window/segment
    change = (logits[:, far] - base[:, far]).abs().amax(dim=(0, 2))
    expectation = MEMORYLESS.get(name, "reaches")
    assert has_memory(model) == (name not in MEMORYLESS), (
        f"{name}: memory layer present = {has_memory(model)}; a model without memory must be "
        f"declared in MEMORYLESS with its expected reach"
    )
    if expectation == "reaches":
        unchanged = (change == 0).nonzero().flatten().add(2 * WINDOW + 1).tolist()
        assert not unchanged, (
            f"{name}: token 0 does not reach positions {unchanged} beyond 2 x window "
            f"(changes there: {change.tolist()})"
        )
    else:
        assert expectation == "unreachable", expectation
        assert change.max().item() == 0, (
            f"{name}: token 0 changed positions beyond 2 x window by up to {change.max():.3e}"
        )


@pytest.mark.parametrize("name", [n for n in MODELS if n not in MEMORYLESS])
def test_token_zero_reaches_far_positions_when_streamed(name):
    """The reach must survive streaming: the memory, not a cache, carries token 0 forward."""
    model = tiny(name)
    ids = tokens(1, 20)
    pieces = [1, 3, 5, 1, 1, 9]  # token 0 alone in the first call; 19 is 2 x window + 11 later
    with torch.no_grad():
        base, _ = run_in_pieces(model, ids, pieces)
        logits, _ = run_in_pieces(model, perturbed(ids, 0), pieces)
    assert not torch.equal(logits[:, -1], base[:, -1]), f"{name}: token 0 forgotten at 19"


# ---------------------------------------------------------------------------------------------
# 6. Pure: a forward changes no parameter or buffer and does not mutate the state passed in.


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", MODELS)
def test_forward_changes_no_parameter_or_buffer(name, mode):
    model = tiny(name).train(mode == "train")
    before = {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()}
    ids = tokens(2, 13)
    _, state = model(ids[:, :6])  # with autograd on: a graph is recorded, nothing is written
    model(ids[:, 6:], state=state)
    after = model.state_dict(keep_vars=True)
    assert set(after) == set(before), f"{name}: forward added/removed {set(after) ^ set(before)}"
    changed = [k for k in before if not torch.equal(before[k], after[k].detach())]
    assert not changed, f"{name}: forward changed {changed}"


@pytest.mark.parametrize("name", MODELS)
def test_forward_does_not_mutate_the_state_passed_in(name):
    model = tiny(name)
    ids = tokens(2, 15)
    with torch.no_grad():
        _, state = model(ids[:, :7])  # ends mid-segment (7 % 4 = 3) and mid-chunk (7 % 3 = 1)
        frozen = snapshot(state)
        first, first_state = model(ids[:, 7:], state=state)
        changed = differences(frozen, snapshot(state))
        assert not changed, f"{name}: forward mutated the state passed in: {changed[:5]}"
        second, second_state = model(ids[:, 7:], state=state)
        # A branch from the same state with different tokens must not disturb it either.
        model(perturbed(ids[:, 7:], 0), state=state)
        third, _ = model(ids[:, 7:], state=state)
    assert torch.equal(first, second), (
        f"{name}: the same state gave different logits the second time (max diff "
        f"{(first - second).abs().max().item():.3e})"
    )
    assert torch.equal(first, third), f"{name}: a branch from the state changed later calls"
    assert not differences(snapshot(first_state), snapshot(second_state)), (
        f"{name}: the same state led to different next states"
    )


@pytest.mark.parametrize("name", MODELS)
def test_no_hidden_state_between_calls(name):
    """All recurrent state is explicit: a call without a state ignores every earlier call."""
    model = tiny(name)
    ids = tokens(2, 10)
    with torch.no_grad():
        first, _ = model(ids)
        model(tokens(2, 17, seed=5))
        run_in_pieces(model, tokens(2, 9, seed=6), [4, 5])
        again, _ = model(ids)
    assert torch.equal(first, again), f"{name}: earlier calls changed a stateless call"
