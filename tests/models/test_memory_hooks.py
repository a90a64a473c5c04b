"""register_memory_hook: a probe observes what a memory layer writes and reads, and may
change the gates, without patching the library."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import titans_atlas as ta
from titans_atlas.layers import MemoryRead, MemoryWrite, NeuralMemory, register_memory_hook


def memory_layers(model) -> list[NeuralMemory]:
    return [m for m in model.modules() if isinstance(m, NeuralMemory)]


def small(name: str):
    torch.manual_seed(0)
    model = ta.create_model(name, vocab_size=32, dim=32, depth=2, num_heads=2, chunk_size=8)
    return model.eval(), torch.randint(0, 32, (2, 24))


def test_a_hook_sees_each_write_with_its_shapes_and_goes_away_on_remove():
    model, ids = small("lmm")
    seen = []
    handles = [register_memory_hook(m, seen.append) for m in memory_layers(model)]
    with torch.no_grad():
        expected, _ = model(ids)
    assert [type(e) for e in seen] == [MemoryWrite, MemoryWrite]
    write = seen[0]
    assert write.layer is memory_layers(model)[0]
    assert write.q.shape[:3] == write.k.shape[:3] == write.v.shape[:3] == (2, 24, 2)
    assert write.lr.shape == write.momentum.shape == write.decay.shape == (2, 24, 2)
    for handle in handles:
        handle.remove()
    with torch.no_grad():
        again, _ = model(ids)
    assert len(seen) == 2
    torch.testing.assert_close(again, expected)


def test_a_hook_that_zeroes_theta_leaves_the_memory_unwritten():
    model, ids = small("lmm")
    layer = memory_layers(model)[0]
    register_memory_hook(layer, lambda e: dataclasses.replace(e, lr=torch.zeros_like(e.lr)))
    with torch.no_grad():
        _, state = model(ids)
    start = layer.initial_state(2).memory
    after = state.blocks[0].memory.weights  # lmm: a block's state is its memory layer's
    for name, weight in start.weights.items():
        decay_only = after[name]
        # no write: what is left of the start is its decay, never a new direction
        cosine = torch.nn.functional.cosine_similarity(
            decay_only.flatten(1).float(), weight.flatten(1).float(), dim=-1
        )
        assert torch.all(cosine > 0.999)


def test_mac_retrieval_is_reported_and_a_wrong_return_is_refused():
    model, ids = small("mac")
    layer = memory_layers(model)[0]
    seen = []
    handle = register_memory_hook(layer, seen.append)
    with torch.no_grad():
        model(ids)
    assert {type(e) for e in seen} == {MemoryWrite, MemoryRead}
    read = next(e for e in seen if isinstance(e, MemoryRead))
    assert read.output.shape[-1] == 32
    handle.remove()
    register_memory_hook(layer, lambda e: "not an event")
    with pytest.raises(TypeError, match="memory hook must return None"), torch.no_grad():
        model(ids)
