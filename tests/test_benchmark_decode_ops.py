"""``benchmarks/decode_ops.py``: the op counter counts what a decode step dispatches and
names the source line; the count is the same in every run (it is not a timing)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

import titans_atlas as ta
from titans_atlas.ops import validating

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "decode_ops.py"
spec = importlib.util.spec_from_file_location("decode_ops", SCRIPT)
decode_ops = importlib.util.module_from_spec(spec)
spec.loader.exec_module(decode_ops)


def count_one_step() -> decode_ops.OpCounter:
    torch.manual_seed(0)
    model = ta.create_model("lmm", preset="debug").eval()
    counter = decode_ops.OpCounter()
    with torch.no_grad(), validating(False):
        _, state = model(torch.randint(0, 64, (1, 9)))
        with counter:
            model(torch.ones(1, 1, dtype=torch.long), state=state)
    return counter


def test_the_counter_attributes_every_op_and_repeats_exactly():
    first, second = count_one_step(), count_one_step()
    assert sum(first.by_op.values()) == sum(first.by_line.values()) > 0
    assert first.by_op == second.by_op and first.by_line == second.by_line
    assert any(line.startswith("layers/neural_memory.py:") for line in first.by_line)
    assert first.by_op["aten.mm"] + first.by_op["aten.bmm"] > 0
