"""The memory estimate behind docs/training.md's table, checked part by part against real
CPU runs at small sizes: parameter, gradient and AdamW bytes after a real step, the stream
state a real forward returns, and the saved activations of a full-depth forward."""

import pytest
import torch

from titans_atlas.memory_estimate.training import estimate_memory, probe, table_row
from titans_atlas.models.backbone import build_model, model_config

SMALL = {"depth": 3, "window": 16, "chunk_size": 16}


def real_static_bytes(config) -> tuple[int, int, int]:
    """Weights, gradients and AdamW moments after one real step."""
    model = build_model(config)
    optimizer = torch.optim.AdamW(model.parameters())
    logits, _ = model(torch.randint(0, config.vocab_size, (2, 32)))
    logits.square().mean().backward()
    optimizer.step()
    weights = sum(p.nbytes for p in model.parameters())
    grads = sum(p.grad.nbytes for p in model.parameters())
    moments = sum(t.nbytes for s in optimizer.state.values() for k, t in s.items() if k != "step")
    return weights, grads, moments


@pytest.mark.parametrize("name", ["mag", "mac", "lmm"])
def test_weights_gradients_and_optimizer_match_a_real_step(name):
    config = model_config(name, "debug", **SMALL)
    estimate = estimate_memory(config, batch_size=1, seq_len=32)
    assert (estimate.weights, estimate.gradients, estimate.optimizer) == real_static_bytes(config)
    sharded = estimate_memory(config, batch_size=1, seq_len=32, world_size=4, strategy="fsdp")
    assert sharded.weights == -(-estimate.weights // 4) and sharded.working > 0


@pytest.mark.parametrize("name", ["mag", "mac", "atlas"])
@pytest.mark.parametrize("memory_checkpoint", [False, True])
def test_state_and_activations_match_a_full_depth_forward(name, memory_checkpoint):
    """Probes at depth 1 and 2, 16 and 32 tokens, extrapolated to depth 3 and 96 tokens,
    against the measured forward of the real depth-3 model on 96 tokens x 4 rows."""
    config = model_config(name, "debug", **SMALL)
    estimate = estimate_memory(
        config, batch_size=4, seq_len=96, memory_checkpoint=memory_checkpoint
    )
    real = probe(config, 96, rows=4, memory_checkpoint=memory_checkpoint)
    assert estimate.activations == pytest.approx(real.activations, rel=0.01)
    assert estimate.stream_state == pytest.approx(real.state, rel=0.001)
    packed = estimate_memory(config, batch_size=4, seq_len=96, stream=False)
    assert packed.stream_state == 0


def test_bad_settings_are_refused():
    config = model_config("mag", "debug", **SMALL)
    with pytest.raises(ValueError, match="strategy"):
        estimate_memory(config, batch_size=1, seq_len=32, strategy="zero")
    with pytest.raises(ValueError, match="probe_tokens"):
        estimate_memory(config, batch_size=1, seq_len=32, probe_tokens=8)


def test_table_row_prints_every_column():
    row = table_row("lmm", "debug", seq_len=64, world_size=2, probe_tokens=32, activations=True)
    assert row.startswith("| lmm debug |") and row.count("|") == 8 and "--" not in row
    short = table_row("lmm", "debug", seq_len=64, world_size=2, probe_tokens=32, activations=False)
    assert short.endswith("| -- | -- |")
