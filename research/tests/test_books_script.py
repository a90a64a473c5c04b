"""research/experiments/books_lm.py: a finished run is scored again without training
(--evaluate-only), optionally with the memory's decay floor lowered (--test-decay-min)."""

import sys
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import books_lm as script  # noqa: E402


def args_for(*extra: str):
    options = ["--model", "lmm", "--steps", "2", "--set", "model.dim=32"]
    return script.build_parser().parse_args([*options, *extra])


@pytest.fixture
def finished_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs/books_lm/... is relative to the working directory
    words = " ".join(f"word{i % 97} and more text" for i in range(600))  # ~13k bytes
    (tmp_path / "train.txt").write_text(words)
    (tmp_path / "held_out.txt").write_text(words[::-1])
    monkeypatch.setattr(script, "DATA", tmp_path)
    monkeypatch.setattr(script, "TRAIN_GLOB", str(tmp_path / "train.txt"))
    monkeypatch.setattr(script, "EVAL_TEXTS", {"held_out": (tmp_path / "held_out.txt", 9000)})
    return script.run(args_for())


def test_evaluate_only_reuses_the_finished_run(finished_run):
    again = script.run(args_for("--evaluate-only"))
    assert again["evaluated_only"] and not finished_run["evaluated_only"]
    assert again["held_out"] == finished_run["held_out"]
    assert again["train_seconds"] is None and finished_run["train_seconds"] is not None
    assert len(finished_run["held_out"]["carried_blocks"]) == 2  # 9,000 bytes: two 4k blocks


def test_a_lowered_floor_is_its_own_row(finished_run):
    lowered = script.run(args_for("--evaluate-only", "--test-decay-min", "1e-6"))
    assert lowered["overrides"] == ["model.dim=32", "test:model.decay_min=1e-06"]
    assert lowered["held_out"]["carried_bpb"] != finished_run["held_out"]["carried_bpb"]
    rows = script.table([finished_run, lowered]).splitlines()[2:]
    assert rows[0].startswith("| lmm (dim=32) |")
    assert rows[1].startswith("| lmm (dim=32, test decay_min=1e-06) |")


def test_evaluate_only_without_a_finished_run_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(script, "DATA", tmp_path)
    with pytest.raises(ValueError, match="finished 2 steps"):
        script.run(args_for("--evaluate-only"))
