"""Untrained models stream long inputs without diverging: the default gates keep the inner
step per chunk (about C theta / (1 - eta) times the Omega gate sum) well below 2."""

import pytest
import torch

import titans_atlas as ta
from titans_atlas.layers import MemoryLayerState


@pytest.mark.parametrize("name", ["lmm", "mac", "mag", "mal", "omeganet"])
def test_untrained_model_streams_1k_tokens_at_chunk_64(name):
    ids = torch.randint(0, 256, (1, 1024), generator=torch.Generator().manual_seed(256))
    torch.manual_seed(0)
    model = ta.create_model(
        name, vocab_size=256, dim=128, depth=2, num_heads=2, window=128, chunk_size=64
    ).eval()
    with torch.no_grad():
        logits, state = model(ids)
    assert torch.isfinite(logits).all()
    block = state.blocks[-1]
    layer = block if isinstance(block, MemoryLayerState) else block.memory
    assert all(torch.isfinite(w).all() for w in layer.memory.weights.values())
