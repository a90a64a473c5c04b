"""research/experiments/compile_options.py: options parse as JSON values, bad ones are refused
by name, and the timed step trains the benchmark model (eager here: a compile takes minutes)."""

import sys
from pathlib import Path

import pytest
import torch

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import compile_options as script  # noqa: E402


def test_an_option_is_a_key_and_a_json_value():
    assert script.parse_option("cpp_wrapper=true") == ("cpp_wrapper", True)
    assert script.parse_option("max_autotune=false") == ("max_autotune", False)
    assert script.parse_option("a.b=3") == ("a.b", 3)


@pytest.mark.parametrize("text", ["cpp_wrapper", "=true", "cpp_wrapper=", "x=yes"])
def test_a_malformed_option_is_refused_by_name(text):
    with pytest.raises(SystemExit, match="--option"):
        script.parse_option(text)


def test_the_eager_step_runs_and_leaves_no_gradient():
    step, model = script.training_step(None)
    before = [p.detach().clone() for p in model.parameters()]
    step()
    assert all(p.grad is None for p in model.parameters())  # zeroed after the backward
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))  # no optimiser
