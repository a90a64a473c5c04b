"""Decoding with ``compile`` = "auto" / true / false (``titans_atlas.compiling.DecodeStep``, used
by ``titans generate`` and ``titans eval``): "auto" rents eager decoding for the pay-off number of
steps, then compiles; a compiled step that raises costs one line and the eager tokens."""

from __future__ import annotations

import math

import pytest
import torch

import titans_atlas as ta
from titans_atlas.compiling import DecodeStep
from titans_atlas.eval.inference import Evaluator

VOCAB = 40


@pytest.fixture(scope="module")
def model() -> ta.LanguageModel:
    torch.manual_seed(0)
    return ta.create_model(
        "lmm", vocab_size=VOCAB, dim=32, depth=2, num_heads=2, window=8, chunk_size=4
    ).double()


def greedy_tokens(step, model, n: int = 12) -> list[int]:
    logits, state = model(torch.tensor([[1, 2, 3]]), None, last_only=True)
    out = []
    for _ in range(n):
        token = logits[:, -1].argmax(-1, keepdim=True)  # [1, 1]
        out.append(int(token))
        logits, state = step(token, state)
    return out


class Counting:
    """A stand-in compiled step: counts its calls, then runs the model or raises."""

    def __init__(self, model, fail: bool = False):
        self.model, self.fail, self.calls, self.built = model, fail, 0, 0

    def make(self):
        self.built += 1
        return self

    def __call__(self, token, state):
        self.calls += 1
        if self.fail:
            raise RuntimeError("BackendCompilerFailed: a fake compiler error")
        return self.model(token, state)


def test_auto_rents_eager_then_compiles_once_it_pays(model):
    compiled = Counting(model)
    never = DecodeStep(model, compiled.make, "auto", pays_after_steps=math.inf)
    reference = greedy_tokens(never, model)
    assert compiled.built == 0 and not never.is_compiled

    step = DecodeStep(model, compiled.make, "auto", pays_after_steps=0, warn=lambda m: None)
    assert greedy_tokens(step, model) == reference
    # 0 eager steps already pay: every step is the compiled one, built once
    assert compiled.built == 1 and compiled.calls == 12 and step.is_compiled
    assert step.reason == "auto: compiled after 0 eager decode steps"

    later = Counting(model)
    step = DecodeStep(model, later.make, "auto", pays_after_steps=5, warn=lambda m: None)
    assert greedy_tokens(step, model) == reference
    # steps 1-5 eager, then the other 7 compiled: the count is of calls, across streams
    assert later.built == 1 and later.calls == 7 and step.eager_steps == 5
    assert greedy_tokens(step, model) == reference and later.calls == 19


def test_a_bad_pay_off_count_is_refused_by_name(model):
    for bad in (-1, float("nan"), True, "8000"):
        with pytest.raises(ValueError, match="pays_after_steps"):
            DecodeStep(model, lambda: None, "auto", pays_after_steps=bad)


def test_a_failing_compiled_step_falls_back_to_the_same_tokens(model):
    lines: list[str] = []
    reference = greedy_tokens(DecodeStep(model, lambda: None, False), model)
    broken = Counting(model, fail=True)
    step = DecodeStep(model, broken.make, True, warn=lines.append)
    assert greedy_tokens(step, model) == reference
    assert broken.calls == 1 and not step.is_compiled and step.reason == "compile failed: eager"
    assert len(lines) == 1 and lines[0].startswith("torch.compile failed (RuntimeError")

    broken_auto = Counting(model, fail=True)
    auto = DecodeStep(model, broken_auto.make, "auto", pays_after_steps=0, warn=lines.append)
    assert greedy_tokens(auto, model) == reference
    assert broken_auto.built == 1  # tried once, never again


def test_false_never_builds_a_compiled_step(model):
    built = Counting(model)
    step = DecodeStep(model, built.make, False, pays_after_steps=0)
    greedy_tokens(step, model)
    assert built.built == 0


def test_bad_setting_is_refused_by_name(model):
    with pytest.raises(ValueError, match="compile must be auto, true or false"):
        DecodeStep(model, lambda: None, "yes")
    with pytest.raises(ValueError, match="compile must be auto, true or false"):
        Evaluator(model, compile="fast")


def test_evaluator_greedy_is_the_same_compiled_or_not(model):
    eager = Evaluator(model, check_budget=False).greedy([1, 2, 3], 6)
    evaluator = Evaluator(model, check_budget=False, compile="auto")
    compiled = Counting(model)
    evaluator.decode = DecodeStep(model, compiled.make, "auto", pays_after_steps=0)
    assert evaluator.greedy([1, 2, 3], 6) == eager and compiled.calls > 0


@pytest.mark.slow
def test_a_really_compiled_decode_step_gives_the_eager_tokens(model):
    """torch.compile itself (inductor on CPU needs a C++ compiler): same greedy tokens."""
    from titans_atlas.generation import compiled_decode_step

    step = DecodeStep(model, lambda: compiled_decode_step(model), True)
    reference = greedy_tokens(DecodeStep(model, lambda: None, False), model)
    assert greedy_tokens(step, model) == reference and step.is_compiled


def test_the_eager_step_skips_the_memory_value_checks_but_not_the_token_ids(model):
    """After a checked prefill, a decode step only continues the stream: the memory layers'
    per-call NaN / gate-range checks (a host sync each) are off, as in a compiled step, and
    the model still checks the token ids at its boundary."""
    from titans_atlas.ops.checks import CountSyncs

    _, state = model(torch.tensor([[1, 2, 3]]), None, last_only=True)
    token = torch.tensor([[4]])
    step = DecodeStep(model, lambda: None, False)
    with CountSyncs() as checked:
        model(token, state)
    with CountSyncs() as stepped:
        step(token, state)
    assert stepped.count < checked.count
    assert torch.equal(step(token, state)[0], model(token, state)[0])
    with pytest.raises(ValueError, match="input_ids"):
        step(torch.tensor([[VOCAB]]), state)
