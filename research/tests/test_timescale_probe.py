"""research/experiments/timescale_probe.py: the per-head medians it prints are the gates the
memory layers use, scaled per head as ``timescale_ratio`` says."""

import sys
from pathlib import Path

import torch

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import timescale_probe as probe  # noqa: E402

import titans_atlas as ta  # noqa: E402
from titans_atlas.layers import MemoryConfig  # noqa: E402


def gates(ratio: float):
    torch.manual_seed(0)  # the same weights whatever the ratio: it is not a parameter
    model = ta.create_model(
        "lmm", vocab_size=64, dim=32, depth=2, num_heads=4, chunk_size=8, timescale_ratio=ratio
    ).eval()
    return probe.head_gates(model, torch.randint(0, 64, (2, 40)))


def test_one_median_per_head_and_layer_inside_the_gates_ranges():
    layers = gates(1.0)
    assert len(layers) == 2
    for theta, alpha in layers:
        assert theta.shape == alpha.shape == (4,)
        assert (theta > 0).all() and (theta <= MemoryConfig().lr_max).all()
        assert (alpha > 0).all() and (alpha <= 1).all()


def test_the_first_layer_s_heads_are_scaled_by_head_scales():
    (theta_1, alpha_1), _ = gates(1.0)
    (theta_r, alpha_r), _ = gates(64.0)  # layer 0 sees the same input in both models
    scales = torch.tensor(MemoryConfig(timescale_ratio=64.0).head_scales(4))
    torch.testing.assert_close(theta_r, theta_1 * scales, rtol=1e-5, atol=0)
    torch.testing.assert_close(alpha_r, alpha_1 * scales, rtol=1e-5, atol=0)
    assert theta_r[-1] < theta_r[0] / 32  # the last head is 64x slower: not a no-op
