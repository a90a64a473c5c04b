"""research/experiments/recall_by_distance.py: a finished run is evaluated again without training
(--evaluate-only), optionally with a lower decay floor (--test-decay-min)."""

import json
import sys
from pathlib import Path

import pytest
import torch

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import recall_by_distance as script  # noqa: E402

from titans_atlas.layers.neural_memory import NeuralMemory  # noqa: E402


def args_for(*extra: str):
    options = ["--model", "lmm", "--steps", "2", "--samples", "2", "--set", "train.log_every=1"]
    return script.build_parser().parse_args([*options, *extra])


@pytest.fixture
def finished_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs/recall/... is relative to the working directory
    monkeypatch.setattr(script, "DISTANCES", (4,))
    monkeypatch.setattr(script, "LENGTHS", (256,))
    return script.run(args_for())


def test_evaluate_only_reuses_the_finished_run_and_changes_only_the_floor(finished_run):
    again = script.run(args_for("--evaluate-only"))
    assert again["evaluated_only"] and not finished_run["evaluated_only"]
    for key in ("distance_accuracy", "length_accuracy", "steps", "parameters"):
        assert again[key] == finished_run[key], key
    assert again["final_loss"] is None and finished_run["final_loss"] is not None
    lowered = script.run(args_for("--evaluate-only", "--test-decay-min", "1e-4"))
    assert lowered["overrides"] == ["train.log_every=1", "test:model.decay_min=0.0001"]
    assert "as trained" in script.table([finished_run, lowered])


def test_evaluate_only_without_a_finished_run_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="finished 2 steps"):
        script.run(args_for("--evaluate-only"))


def test_set_decay_floor_changes_the_decay_gate_only():
    import titans_atlas as ta

    model = ta.create_model("lmm", vocab_size=16, dim=32, depth=1, num_heads=2)
    layer = next(m for m in model.modules() if isinstance(m, NeuralMemory))
    before = {n: p.clone() for n, p in model.state_dict().items()}
    script.set_decay_floor(model, 0.0)
    assert layer.config.decay_min == 0.0
    assert all(torch.equal(before[n], p) for n, p in model.state_dict().items())
    with pytest.raises(ValueError, match="decay_min"):
        script.set_decay_floor(model, 1.5)


def test_other_lengths_and_pairs_are_recorded_and_tabulated_beside_the_others(finished_run):
    again = script.run(args_for("--evaluate-only", "--lengths", "300", "--test-pairs", "1"))
    assert list(again["length_accuracy"]) == ["300"]
    assert again["overrides"] == ["train.log_every=1", "test:pairs=1"]
    rows = script.table([finished_run, again]).splitlines()
    assert "L=256 | L=300" in rows[0]
    assert rows[2].count(" - ") == 1 and rows[3].count(" - ") == 1  # each lacks the other's


@pytest.mark.parametrize("pairs", ["0", "15"])
def test_a_bad_pair_count_is_refused_before_training(tmp_path, monkeypatch, pairs):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="--test-pairs"):
        script.run(args_for("--test-pairs", pairs))
    assert not (tmp_path / "runs").exists()


def test_plot_match_draws_only_the_matching_runs(finished_run, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    again = script.run(args_for("--evaluate-only", "--test-pairs", "1"))
    records = tmp_path / "records.jsonl"
    records.write_text("\n".join(json.dumps(r) for r in (finished_run, again)) + "\n")
    capsys.readouterr()
    script.plot(records, tmp_path / "subset.png", match=["test:pairs=1"])
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 3 and "test:pairs=1" in rows[2]  # header, rule, the one match
    assert (tmp_path / "subset.png").stat().st_size > 0
    with pytest.raises(ValueError, match="--plot-match"):
        script.plot(records, tmp_path / "none.png", match=["nothing like it"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--plot-match", "x", "--plot-out", "a.png"], "needs --plot"),
        (["--plot", "--plot-match", "x"], "needs --plot-out"),
        (["--plot", "--plot-out", "a.png"], "needs --plot-match"),
        (["--plot-out", "a.png"], "needs --plot-match"),
    ],
)
def test_plot_subset_options_alone_are_refused(argv, message):
    args = script.build_parser().parse_args(argv)
    with pytest.raises(ValueError, match=message):
        script.check_plot_options(args)
    script.check_plot_options(script.build_parser().parse_args([]))  # none of them: fine
