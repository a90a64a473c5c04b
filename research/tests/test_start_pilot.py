"""research/experiments/start_pilot.py: the pilot start is the shifted address (q_t = k_{t+1}
up to the halved random taps) on top of the independent start, applied to every memory layer."""

import sys
from pathlib import Path

import torch

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import start_pilot as script  # noqa: E402

from titans_atlas import create_model  # noqa: E402


def test_the_start_copies_query_rows_and_adds_the_delay_taps():
    torch.manual_seed(0)
    model = create_model("lmm", vocab_size=64, dim=32, depth=2, num_heads=2,
                         conv_kernel=4, qk_init="independent")  # fmt: skip
    before = {n: p.clone() for n, p in model.named_parameters() if ".conv." in n}
    assert script.shifted_mix_start(model) == 2
    assert len(before) == 2 * 3 * 2  # layers x (q, k, v) x (weight, bias)
    for module in model.modules():
        if hasattr(module, "to_qkv") and isinstance(getattr(module, "conv", None), torch.nn.Module):
            w = module.to_qkv.weight
            width = w.shape[0] // 3
            assert torch.equal(w[:width], w[width : 2 * width])
            for conv in module.conv.values():
                assert torch.count_nonzero(conv.conv.bias) == 0
    for name, old in before.items():
        new = dict(model.named_parameters())[name]
        if name.endswith("weight"):
            lag = script.DELAYS[name.split(".conv.")[1].split(".")[0]]
            expected = old * script.TAP_SCALE
            expected[:, 0, old.shape[-1] - 1 - lag] += 1.0
            torch.testing.assert_close(new, expected)


def test_the_key_delay_variant_leaves_query_and_value_paths_alone():
    torch.manual_seed(0)
    model = create_model("lmm", vocab_size=64, dim=32, depth=1, num_heads=2,
                         conv_kernel=4, qk_init="independent")  # fmt: skip
    params = dict(model.named_parameters())
    before = {n: p.clone() for n, p in params.items()}
    assert script.shifted_mix_start(model, **script.VARIANTS["key-delay"]) == 1
    changed = {n for n, p in params.items() if not torch.equal(p, before[n])}
    assert changed and all(".conv.k." in n for n in changed), changed
    key_weight = next(n for n in changed if n.endswith("weight"))
    expected = before[key_weight] * script.TAP_SCALE
    expected[:, 0, -2] += 1.0  # the previous token's tap
    torch.testing.assert_close(params[key_weight], expected)


def test_the_half_heads_variant_starts_only_the_first_half_of_the_heads():
    torch.manual_seed(0)
    model = create_model("lmm", vocab_size=64, dim=32, depth=1, num_heads=4,
                         conv_kernel=4, qk_init="independent")  # fmt: skip
    layer = next(m for m in model.modules() if hasattr(m, "to_qkv") and hasattr(m, "conv"))
    weight_before = layer.to_qkv.weight.clone()
    convs_before = {n: c.conv.weight.clone() for n, c in layer.conv.items()}
    assert script.shifted_mix_start(model, **script.VARIANTS["half-heads"]) == 1
    width = weight_before.shape[0] // 3
    half = width // 2  # heads 0 and 1 of 4
    weight = layer.to_qkv.weight
    assert torch.equal(weight[:half], weight_before[width : width + half])
    assert torch.equal(weight[half:], weight_before[half:])
    for name, conv in layer.conv.items():
        assert torch.count_nonzero(conv.conv.bias[:half]) == 0
        assert torch.count_nonzero(conv.conv.bias[half:]) > 0
        assert torch.equal(conv.conv.weight[half:], convs_before[name][half:])
