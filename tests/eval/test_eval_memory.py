"""The memory estimator: measured state growth, a refusal that says the number, and --force."""

import pytest

import titans_atlas.eval.inference as inference
from titans_atlas import create_model
from titans_atlas.eval import (
    EvalSettings,
    Evaluator,
    MemoryBudgetError,
    estimate_peak_memory,
    run_task,
)
from titans_atlas.memory_estimate.inference import available_memory, check_memory, state_bytes_at
from titans_atlas.tokenizers import ByteTokenizer


@pytest.mark.parametrize("name", ["lmm", "swa", "mac"])
def test_streaming_models_have_a_state_that_does_not_grow(name):
    model = create_model(name, preset="debug").eval()
    assert state_bytes_at(model, 1 << 20) == state_bytes_at(model, 1 << 12)


def test_full_attention_state_grows_with_the_kv_cache():
    model = create_model("transformer", preset="debug").eval()
    small, large = state_bytes_at(model, 4096), state_bytes_at(model, 8192)
    # per token and layer: a key and a value (dim floats each) and an int64 position
    per_token = model.config.depth * (2 * model.config.dim * 4 + 8)
    assert large - small == 4096 * per_token


def test_estimate_parts_and_growth_with_the_piece():
    model = create_model("lmm", preset="debug").eval()
    small = estimate_peak_memory(model, 65536, piece_size=512)
    large = estimate_peak_memory(model, 65536, piece_size=4096)
    assert small.parameters == sum(p.numel() * 4 for p in model.parameters())
    assert small.state == large.state > 0 and large.working > small.working
    assert small.total == small.parameters + 2 * small.state + small.working
    assert "GiB" in small.describe()


def test_refusal_says_the_number_and_force_runs_anyway():
    model = create_model("transformer", preset="debug").eval()
    estimate = estimate_peak_memory(model, 1 << 20, piece_size=2048)
    with pytest.raises(MemoryBudgetError, match=r"\d+\.\d+ GiB.*only 0\.000 GiB"):
        check_memory(estimate, available=1000)
    check_memory(estimate, available=1000, force=True)
    check_memory(estimate, available=estimate.total)
    assert available_memory("cpu") > 0


def test_run_task_refuses_a_length_beyond_the_budget(monkeypatch):
    monkeypatch.setattr(inference, "available_memory", lambda device: 10_000)
    model = create_model("lmm", preset="debug").eval()
    settings = EvalSettings(distances=(8,), samples=1, extra={"vocab_size": 64})
    with pytest.raises(MemoryBudgetError, match="--force"):
        run_task("kv-recall", model, ByteTokenizer(), settings)
    forced = EvalSettings(distances=(8,), samples=1, extra={"vocab_size": 64}, force=True)
    assert run_task("kv-recall", model, ByteTokenizer(), forced)["samples"]


def test_evaluator_checks_each_octave_once():
    model = create_model("lmm", preset="debug").eval()
    evaluator = Evaluator(model)
    first = evaluator.ensure_memory(3000)
    assert evaluator.ensure_memory(4000) is first and first.length == 4096
