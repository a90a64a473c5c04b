"""Per-head timescales (``MemoryConfig.timescale_ratio``): head h's theta and alpha scaled by
ratio ** (-h / (H - 1)), theta by its own ``timescale_lr_ratio`` where that is set. The
scales, the gates against the unscaled layer, the default left alone, the scan's float64
parity and gradients under the option, streaming, the saved format and bad values."""

from __future__ import annotations

import json
import math

import pytest
import torch

import titans_atlas as ta
from helpers import check_older_format, rewrite_saved_memory, streamed_logits
from titans_atlas.layers.memory_config import MemoryConfig

TINY = {"vocab_size": 50, "dim": 16, "depth": 2, "num_heads": 4, "window": 4, "chunk_size": 3}


@pytest.mark.parametrize("heads", [1, 2, 4, 7])
@pytest.mark.parametrize("ratio", [1.0, 8.0, 256.0])
def test_head_scales_run_log_spaced_from_one_to_one_over_the_ratio(heads, ratio):
    scales = MemoryConfig(timescale_ratio=ratio).head_scales(heads)
    assert len(scales) == heads and scales[0] == 1.0
    if heads > 1:
        assert math.isclose(scales[-1], 1 / ratio)
        steps = [scales[h + 1] / scales[h] for h in range(heads - 1)]
        assert all(math.isclose(step, ratio ** (-1 / (heads - 1))) for step in steps)


def layer(ratio: float, **options) -> ta.NeuralMemory:
    torch.manual_seed(0)
    config = MemoryConfig(chunk_size=3, timescale_ratio=ratio, **options)
    memory = ta.NeuralMemory(16, 4, config).double()
    with torch.no_grad():  # gates that differ from token to token and from head to head
        memory.to_gates.weight.normal_(std=1.0)
    return memory


@pytest.mark.parametrize("omega_window", [1, 3])
def test_theta_and_alpha_are_scaled_per_head_and_eta_is_not(omega_window):
    scaled, plain = layer(64.0, omega_window=omega_window), layer(1.0, omega_window=omega_window)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    lr, momentum, decay, omega = scaled._gates(x)
    lr_1, momentum_1, decay_1, omega_1 = plain._gates(x)
    scale = torch.tensor(scaled.config.head_scales(4), dtype=torch.float64)
    torch.testing.assert_close(lr, lr_1 * scale, rtol=1e-15, atol=0)
    torch.testing.assert_close(decay, decay_1 * scale, rtol=1e-15, atol=0)
    torch.testing.assert_close(momentum, momentum_1, rtol=0, atol=0)
    if omega_window > 1:
        torch.testing.assert_close(omega, omega_1, rtol=0, atol=0)
    # the last head writes and forgets 64x slower; the first keeps the layer's bounds
    assert lr[..., -1].max() <= scaled.config.lr_max / 64 and decay[..., 0].min() > 0
    y, _ = scaled(x)
    assert (y - plain(x)[0]).abs().max() > 1e-6, "the option changed nothing"


@pytest.mark.parametrize("lr_ratio", [1.0, 8.0, 64.0])
def test_theta_takes_its_own_spread_and_alpha_keeps_the_full_one(lr_ratio):
    scaled = layer(64.0, timescale_lr_ratio=lr_ratio)
    plain = layer(1.0)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    lr, momentum, decay, _ = scaled._gates(x)
    lr_1, momentum_1, decay_1, _ = plain._gates(x)
    lr_scale = torch.tensor([lr_ratio ** (-h / 3) for h in range(4)], dtype=torch.float64)
    decay_scale = torch.tensor([64.0 ** (-h / 3) for h in range(4)], dtype=torch.float64)
    torch.testing.assert_close(lr, lr_1 * lr_scale, rtol=1e-15, atol=0)
    torch.testing.assert_close(decay, decay_1 * decay_scale, rtol=1e-15, atol=0)
    torch.testing.assert_close(momentum, momentum_1, rtol=0, atol=0)
    assert scaled.config.lr_head_scales(4) == pytest.approx(lr_scale.tolist(), rel=1e-15)


def test_an_lr_ratio_equal_to_the_ratio_is_the_shared_spread():
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    shared, same = layer(32.0), layer(32.0, timescale_lr_ratio=32.0)
    torch.testing.assert_close(same(x)[0], shared(x)[0], rtol=0, atol=0)


def test_the_default_is_one_and_leaves_every_head_the_same():
    assert MemoryConfig().timescale_lr_ratio is None
    assert MemoryConfig().timescale_ratio == 1.0
    assert MemoryConfig().head_scales(8) == [1.0] * 8


@pytest.mark.parametrize("lr_ratio", [None, 4.0])
@pytest.mark.parametrize("steps", [1, 7, 63, 100])
@pytest.mark.parametrize("chunk", [1, 4, 16])
def test_chunked_form_equals_the_reference_with_timescales(steps, chunk, lr_ratio):
    """Outputs, final state and gradients of every input and parameter, in float64."""
    memory = layer(32.0, omega_window=2, timescale_lr_ratio=lr_ratio)
    memory.config.chunk_size = chunk
    x = torch.randn(2, steps, 16, dtype=torch.float64, requires_grad=True)
    results = []
    for impl in ("reference", "chunk"):
        memory.set_runtime(impl=impl)
        memory.zero_grad()
        x.grad = None
        y, state = memory(x)
        final: list[torch.Tensor] = []  # every tensor of the final memory state
        state.memory.map_tensors(final.append)
        assert final, "no state tensors to compare"
        (y.square().sum() + sum(t.square().sum() for t in final)).backward()
        grads = [x.grad.clone()] + [p.grad.clone() for p in memory.parameters()]
        results.append((y.detach(), [t.detach() for t in final], grads))
    (y_ref, w_ref, g_ref), (y_chunk, w_chunk, g_chunk) = results
    torch.testing.assert_close(y_chunk, y_ref, rtol=1e-10, atol=1e-10)
    for a, b in zip(w_chunk, w_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    for a, b in zip(g_chunk, g_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def tiny(ratio: float, name: str = "lmm") -> ta.LanguageModel:
    torch.manual_seed(0)
    return ta.create_model(name, **TINY, timescale_ratio=ratio)


@pytest.mark.parametrize("lengths", [[1] * 13, [5, 1, 7], [2, 11]])
def test_streaming_any_split_equals_one_call(lengths):
    model = tiny(16.0)
    ids = torch.randint(0, 50, (2, sum(lengths)), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        whole, _ = model(ids)
    streamed, _ = streamed_logits(model, ids, lengths)
    torch.testing.assert_close(streamed, whole, rtol=0, atol=1e-4)


def saved_and_loaded(model: ta.LanguageModel, directory) -> ta.LanguageModel:
    """``model`` through save_pretrained / load_model, checked to give the same logits."""
    model.save_pretrained(str(directory))
    loaded = ta.load_model(str(directory))
    ids = torch.randint(0, 50, (1, 12))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids)[0], model(ids)[0], rtol=0, atol=0)
    return loaded


def test_the_ratio_round_trips_through_a_saved_model(tmp_path):
    loaded = saved_and_loaded(tiny(64.0, "mag"), tmp_path)
    assert loaded.config.memory.timescale_ratio == 64.0


def test_the_lr_ratio_round_trips_and_a_format_7_file_loads_without_it(tmp_path):
    torch.manual_seed(0)
    model = ta.create_model("lmm", **TINY, timescale_ratio=64.0, timescale_lr_ratio=8.0)
    assert saved_and_loaded(model, tmp_path).config.memory.timescale_lr_ratio == 8.0
    rewrite_saved_memory(tmp_path, 7)  # format 7: theta shared alpha's spread
    assert ta.load_model(str(tmp_path)).config.memory.timescale_lr_ratio is None
    meta = json.loads((tmp_path / "config.json").read_text())
    meta["config"]["memory"]["timescale_lr_ratio"] = 8.0  # format 7 cannot name a later field
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ta.CheckpointError, match="timescale_lr_ratio"):
        ta.load_model(str(tmp_path))


def test_a_format_6_file_loads_with_every_head_the_same(tmp_path):
    check_older_format(tiny(1.0), tmp_path, 6, "memory.timescale_ratio")


@pytest.mark.parametrize("bad", [0.5, 0.0, -2.0, float("nan"), float("inf"), True, "64"])
def test_a_bad_ratio_names_the_field(bad):
    with pytest.raises(ValueError, match="timescale_ratio"):
        MemoryConfig(timescale_ratio=bad)
    with pytest.raises(ValueError, match="timescale_ratio"):
        ta.create_model("lmm", **TINY, timescale_ratio=bad)


@pytest.mark.parametrize("bad", [0.5, 0.0, 128.0, float("nan"), float("inf"), True, "8"])
def test_a_bad_lr_ratio_names_the_field(bad):
    with pytest.raises(ValueError, match="timescale_lr_ratio"):
        MemoryConfig(timescale_ratio=64.0, timescale_lr_ratio=bad)
    with pytest.raises(ValueError, match="timescale_lr_ratio"):
        ta.create_model("lmm", **TINY, timescale_ratio=64.0, timescale_lr_ratio=bad)


def test_an_lr_ratio_without_timescales_is_refused():
    with pytest.raises(ValueError, match="timescale_lr_ratio must be at most timescale_ratio"):
        MemoryConfig(timescale_lr_ratio=8.0)
