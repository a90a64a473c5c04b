"""Omega gates taken from the token each window tap weights (``omega_gate_source="tap"``):
gamma[t, j] = gate of token t - j at age j. The shift against a per-step loop, pieces of a
stream against one call, the layer against the scan fed the shifted gates by hand, and the
model properties that must survive the option (causal, streamable, states kept apart)."""

from __future__ import annotations

import pytest
import torch

import titans_atlas as ta
from helpers import streamed_logits
from titans_atlas.layers.neural_memory import MemoryLayerState, gates_by_tap
from titans_atlas.ops import memory_scan

TINY = {"vocab_size": 50, "dim": 16, "depth": 2, "num_heads": 2, "window": 4, "chunk_size": 3}


def gates_by_tap_ref(gates: torch.Tensor) -> torch.Tensor:
    """One step and one tap at a time: gamma[t, j] = gates[t - j, j], 0 before the stream."""
    gamma = torch.zeros_like(gates)
    for t in range(gates.shape[1]):
        for j in range(gates.shape[-1]):
            if t - j >= 0:
                gamma[:, t, :, j] = gates[:, t - j, :, j]
    return gamma


@pytest.mark.parametrize("steps", [1, 7, 63, 100])
@pytest.mark.parametrize("window", [2, 5, 8])
def test_shift_matches_the_per_step_loop(steps, window):
    gates = torch.rand(2, steps, 3, window, dtype=torch.float64)
    gamma, history = gates_by_tap(gates, None)
    torch.testing.assert_close(gamma, gates_by_tap_ref(gates), rtol=0, atol=0)
    assert history.shape == (2, window - 1, 3, window)


@pytest.mark.parametrize("lengths", [[1] * 11, [3, 1, 7], [2, 9], [10, 1]])
def test_pieces_with_history_equal_one_call(lengths):
    gates = torch.rand(2, sum(lengths), 3, 5, dtype=torch.float64)
    whole, _ = gates_by_tap(gates, None)
    pieces, history, start = [], None, 0
    for length in lengths:
        gamma, history = gates_by_tap(gates[:, start : start + length], history)
        pieces.append(gamma)
        start += length
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, rtol=0, atol=0)
    torch.testing.assert_close(history, torch.cat([torch.zeros_like(gates), gates], 1)[:, -4:])


def memory_layer(source: str) -> ta.NeuralMemory:
    torch.manual_seed(0)
    config = ta.MemoryConfig(chunk_size=3, omega_window=4, omega_gate_source=source)
    layer = ta.NeuralMemory(16, 2, config).double()
    with torch.no_grad():  # gates that differ from token to token and from tap to tap
        layer.to_gates.weight.normal_(std=1.0)
    return layer


def test_layer_feeds_the_scan_the_gates_of_the_weighted_tokens():
    layer = memory_layer("tap")
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    y, _ = layer(x)
    # the same layer, with the scan handed gamma[t, j] = gate(x_{t-j})_j built by the loop
    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs["omega_gate"])
        return memory_scan(*args, **kwargs)

    step = memory_layer("step")
    step.load_state_dict(layer.state_dict())
    _, _, _, per_token = step._gates(x)
    original = ta.layers.neural_memory.memory_scan
    ta.layers.neural_memory.memory_scan = spy
    try:
        layer(x)
    finally:
        ta.layers.neural_memory.memory_scan = original
    torch.testing.assert_close(calls[0], gates_by_tap_ref(per_token), rtol=0, atol=0)
    y_step, _ = step(x)
    assert (y - y_step).abs().max() > 1e-6, "the gate source changed nothing"


@pytest.mark.parametrize("source", ["tap", "step"])
def test_a_token_s_later_age_gates_reach_only_later_outputs(source):
    """Under "tap" the gate token 4 gives itself at age j >= 1 weights step 4 + j's write, so
    outputs 0..4 cannot depend on it; under "step" that gate weights token 4 - j at step 4."""
    layer, captured = memory_layer(source), []

    def keep(module, inputs, out):  # the raw gate logits [B, T, (g h)], kept for their grad
        out.retain_grad()
        captured.append(out)

    layer.to_gates.register_forward_hook(keep)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    y, _ = layer(x)
    y[:, :5].square().sum().backward()
    grad = captured[0].grad.view(2, 9, 3 + 4, 2)  # [B, T, (g h)] -> [B, T, gate, H]
    later_ages = grad[:, 4, 4:].abs().amax()  # token 4's gates at ages 1..3 (gate 3 + j)
    if source == "tap":
        assert later_ages == 0 and grad[:, 4, 3].abs().amax() > 0  # age 0 is used at step 4
    else:
        assert later_ages > 0


def tiny(source: str) -> ta.LanguageModel:
    torch.manual_seed(0)
    return ta.create_model("omeganet", **TINY, omega_gate_source=source)


@pytest.mark.parametrize("lengths", [[1] * 13, [5, 1, 7], [2, 11]])
def test_streaming_any_split_equals_one_call(lengths):
    model = tiny("tap")
    ids = torch.randint(0, 50, (2, sum(lengths)), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        whole, _ = model(ids)
    streamed, state = streamed_logits(model, ids, lengths)
    torch.testing.assert_close(streamed, whole, rtol=0, atol=1e-4)
    assert all(isinstance(block, MemoryLayerState) for block in state.blocks)  # LMM layout
    assert all(block.omega.shape == (2, 7, 2, 8) for block in state.blocks)  # c-1 rows, c gates


def test_causal_changing_a_token_leaves_earlier_outputs_identical():
    model = tiny("tap")
    ids = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(2))
    other = ids.clone()
    other[:, 9] = (other[:, 9] + 17) % 50
    with torch.no_grad():
        base, _ = model(ids)
        changed, _ = model(other)
    assert torch.equal(base[:, :9], changed[:, :9])
    assert not torch.equal(base[:, 9:], changed[:, 9:])


def test_a_state_of_the_other_gate_source_is_refused():
    ids = torch.randint(0, 50, (1, 5))
    _, state = tiny("step")(ids)
    with pytest.raises(ValueError, match="omega_gate_source"):
        tiny("tap")(ids, state=state)
