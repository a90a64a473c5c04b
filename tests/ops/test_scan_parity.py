"""The chunked dual form equals the per-token reference in float64: outputs, final state,
and the gradients of every input, of the initial weights and of the initial momentum."""

import pytest
import torch

import titans_atlas.ops.scan as scan_module
from helpers import (
    MEMORIES,
    assert_close,
    assert_states_close,
    check_parity,
    random_inputs,
    run_both,
    scan,
    setup_case,
)


@pytest.mark.parametrize("read", ["after", "before"])
@pytest.mark.parametrize("length", [1, 7, 20, 63])
@pytest.mark.parametrize("chunk_size", [1, 3, 8])
@pytest.mark.parametrize("memory_id", list(MEMORIES))
def test_chunk_equals_reference(memory_id, chunk_size, length, read):
    memory, inputs, weights, momentum = setup_case(memory_id, length)
    check_parity(run_both(memory, inputs, weights, momentum, chunk_size=chunk_size, read=read))


@pytest.mark.parametrize("memory_id", ["mlp", "gated-res"])
@pytest.mark.parametrize("offset", [1, 5])
def test_chunk_equals_reference_from_mid_chunk_state(memory_id, offset):
    """Continuing from a state that stands inside a chunk (base weights != current weights)."""
    memory, inputs, weights, momentum = setup_case(memory_id, length=17)
    prefix = random_inputs(memory, length=offset, heads=2)

    def advance(state):
        return scan(memory, prefix, state, chunk_size=6, impl="reference")[1]

    results = run_both(memory, inputs, weights, momentum, state_fn=advance, chunk_size=6)
    assert results[0][1].position == offset + 17
    check_parity(results)


@pytest.mark.parametrize("rule", ["momentum", "muon", "muon_chunk"])
@pytest.mark.parametrize("memory_id", ["mlp", "gated"])
def test_checkpointing_changes_nothing(memory_id, rule):
    memory, inputs, weights, momentum = setup_case(memory_id, length=20, window=2)
    kwargs = dict(chunk_size=4, omega_window=2, update_rule=rule)
    plain = run_both(memory, inputs, weights, momentum, **kwargs)[1]
    ckpt = run_both(memory, inputs, weights, momentum, checkpoint=True, **kwargs)[1]
    check_parity([plain, ckpt], rtol=1e-12)


AUTO_CASES = [(4, 1, "token"), (4, 2, "chunk"), (64, 4, "token"), (64, 5, "chunk")]


@pytest.mark.parametrize("chunk_size, length, expected", AUTO_CASES)
def test_auto_picks_the_loop_for_short_calls_and_stays_exact(
    monkeypatch, chunk_size, length, expected
):
    """impl="auto" runs the fused per-token loop for at most max(1, C // 16) tokens."""
    memory, inputs, weights, _ = setup_case("mlp", length)
    state = memory.initial_state(weights, 2)
    called = []
    for name, form in list(scan_module.IMPLS.items()):

        def spy(*args, _form=form, _name=name, **kwargs):
            called.append(_name)
            return _form(*args, **kwargs)

        monkeypatch.setitem(scan_module.IMPLS, name, spy)
    y_auto, s_auto = scan(memory, inputs, state, chunk_size=chunk_size, impl="auto")
    assert called == [expected]
    y_ref, s_ref = scan(memory, inputs, state, chunk_size=chunk_size, impl="reference")
    assert_close(y_auto, y_ref)
    assert_states_close(s_auto, s_ref)


def test_float32_parity_is_within_float32_precision():
    memory, inputs, weights, _ = setup_case("mlp", length=63)
    inputs = {n: None if x is None else x.float() for n, x in inputs.items()}
    weights = {n: w.float() for n, w in weights.items()}
    state = memory.initial_state(weights, 2)
    y_ref, s_ref = scan(memory, inputs, state, chunk_size=16, impl="reference")
    y_chunk, s_chunk = scan(memory, inputs, state, chunk_size=16, impl="chunk")
    assert y_chunk.dtype == torch.float32
    assert_close(y_chunk, y_ref, rtol=1e-4)
    assert_states_close(s_chunk, s_ref, rtol=1e-4)


@pytest.mark.parametrize("muon", [False, True])
def test_gradients_at_the_gate_bounds_equal_the_reference(muon):
    """eta = 0 and alpha = 1 are legal: the products they enter must keep their derivatives."""
    memory, inputs, weights, momentum = setup_case("mlp", length=9, window=2)
    inputs["momentum"][:, 3] = 0.0
    inputs["decay"][:, 5] = 1.0
    check_parity(
        run_both(memory, inputs, weights, momentum, chunk_size=4, omega_window=2, muon=muon),
        rtol=1e-8,
    )
