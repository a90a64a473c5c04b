"""Bad input to memory_scan raises a ValueError that names the argument, never a broadcast."""

import pytest
import torch

from helpers import MEMORIES, random_inputs, scan
from titans_atlas.ops import memory_scan


def call(memory_id="mlp", length=5, window=1, state=None, **changes):
    memory = MEMORIES[memory_id]
    inputs = random_inputs(memory, length=length, window=window, dtype=torch.float32)
    kwargs = {"chunk_size": 2, "omega_window": window}
    for name, value in changes.items():
        (inputs if name in inputs else kwargs)[name] = value
    state = state or memory.initial_state(memory.init_weights(2), 2)
    return scan(memory, inputs, state, **kwargs)


@pytest.mark.parametrize(
    "changes, argument",
    [
        ({"q": torch.randn(2, 5, 2)}, "q"),
        ({"k": torch.randn(2, 4, 2, 5)}, "k"),
        ({"k": torch.randn(1, 5, 2, 5)}, "k"),
        ({"v": torch.randn(2, 5, 3, 3)}, "v"),
        ({"v": torch.randn(2, 5, 2, 4)}, "v width"),
        ({"q": torch.randn(2, 5, 2, 4), "k": torch.randn(2, 5, 2, 4)}, "q/k width"),
        ({"lr": torch.rand(2, 5)}, "lr"),
        ({"lr": torch.rand(2, 5, 1)}, "lr"),
        ({"lr": -torch.rand(2, 5, 2)}, "lr"),
        ({"momentum": 1 + torch.rand(2, 5, 2)}, "momentum"),
        ({"decay": torch.full((2, 5, 2), float("nan"))}, "decay"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"chunk_size": 2.5}, "chunk_size"),
        ({"read": "during"}, "read"),
        ({"impl": "fast"}, "impl"),
        ({"muon": "yes"}, "muon"),
        ({"muon": 1}, "muon"),
        ({"update_rule": "adam"}, "update_rule"),
        ({"update_rule": "muon", "muon": True}, "not both"),
        ({"checkpoint": "no"}, "checkpoint"),
        ({"omega_window": 0}, "omega_window"),
        ({"omega_window": 3}, "omega_gate"),
        ({"omega_gate": torch.rand(2, 5, 2, 2)}, "omega_gate"),
    ],
)
def test_bad_input_names_the_argument(changes, argument):
    with pytest.raises(ValueError, match=argument):
        call(**changes)


def test_omega_gate_of_the_wrong_width():
    with pytest.raises(ValueError, match="omega_gate"):
        call(window=3, omega_gate=torch.rand(2, 5, 2, 2))


def test_state_for_another_batch_or_memory():
    memory = MEMORIES["mlp"]
    with pytest.raises(ValueError, match="state"):
        call(state=memory.initial_state(memory.init_weights(2), 3))
    other = MEMORIES["gated"]
    with pytest.raises(ValueError, match=r"state\.weights"):
        call(state=other.initial_state(other.init_weights(2), 2))
    with pytest.raises(ValueError, match="state"):
        memory_scan(
            memory,
            *[torch.zeros(2, 5, 2, 5)] * 2,
            torch.zeros(2, 5, 2, 3),
            *[torch.zeros(2, 5, 2)] * 3,
            state=None,
        )


def test_chunk_grid_cannot_change_mid_stream():
    state = call(chunk_size=4)[1]
    with pytest.raises(ValueError, match="chunk_size"):
        call(state=state, chunk_size=3)
    assert call(state=state, chunk_size=4)[1].position == 10
    with pytest.raises(ValueError, match="omega_window"):
        call(state=state, chunk_size=4, window=2)
