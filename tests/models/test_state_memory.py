"""A stream's state holds O(window + chunk) memory: no tensor in it pins a prompt-length
buffer (a slice of the input would keep the whole input alive), and ``last_only`` prefill
logits match the full forward."""

import pytest
import torch

import titans_atlas as ta
from titans_atlas.ops.state import map_tensors

TINY = {"vocab_size": 50, "dim": 16, "depth": 2, "num_heads": 2, "window": 4, "chunk_size": 3}


def tensors_in(obj) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    map_tensors(obj, found.append)
    return found


@pytest.mark.parametrize("name", ta.list_models())
def test_state_tensors_own_only_their_own_memory(name):
    torch.manual_seed(0)
    model = ta.create_model(name, **TINY)
    with torch.no_grad():
        _, state = model(torch.randint(0, 50, (2, 40)))
    for tensor in tensors_in(state):
        assert tensor.untyped_storage().nbytes() <= tensor.numel() * tensor.element_size(), (
            f"a {list(tensor.shape)} state tensor pins {tensor.untyped_storage().nbytes()} bytes"
        )


@pytest.mark.parametrize("name", ["mac", "atlas", "swa"])
def test_last_only_logits_equal_the_last_row_of_the_full_forward(name):
    torch.manual_seed(0)
    model = ta.create_model(name, **TINY)
    ids = torch.randint(0, 50, (2, 11))
    full, state_full = model(ids)
    last, state_last = model(ids, last_only=True)
    assert last.shape == (2, 1, 50)
    assert torch.allclose(last[:, 0], full[:, -1], rtol=0, atol=1e-6)  # BLAS row blocking
    assert state_last.position == state_full.position == 11


def test_state_helpers_detach_move_and_measure():
    torch.manual_seed(0)
    model = ta.create_model("mag", **TINY)
    _, short = model(torch.randint(0, 50, (2, 12)))
    _, long = model(torch.randint(0, 50, (2, 36)))
    assert short.nbytes() == long.nbytes() > 0  # bounded: no cache grows with the stream
    detached = long.detach()
    assert all(not t.requires_grad for t in tensors_in(detached))
    assert any(t.requires_grad for t in tensors_in(long))
    moved = detached.to("meta")  # a device other than the one the state is on
    assert all(t.is_meta for t in tensors_in(moved))
    assert moved.position == long.position and moved.batch_size == long.batch_size


def test_a_state_from_another_architecture_is_rejected():
    mac, lmm = ta.create_model("mac", **TINY), ta.create_model("lmm", **TINY)
    _, state = mac(torch.randint(0, 50, (2, 5)))
    with pytest.raises(ValueError, match="state"):
        lmm(torch.randint(0, 50, (2, 3)), state)
