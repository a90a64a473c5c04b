"""research/mqar_sweep.py: the state-size formula, and a tiny resumable sweep with its table."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mqar_sweep as script

import titans_atlas as ta


@pytest.mark.parametrize(
    ("name", "fields", "expected"),
    [
        ("transformer", {}, 2 * 2 * 64 * 128),  # depth x (K, V) x width x L
        ("swa", {"window": 16}, 2 * 2 * 64 * 16),  # the window's KV cache
        ("gdn", {}, 2 * 1 * 64 * 64),  # depth x heads x Dk x Dv, no momentum
        ("lmm", {}, 2 * 2 * (64 * 256 + 256 * 64)),  # weights and momentum, MLP x4
        ("mag", {"window": 16}, 2 * 2 * 64 * 16 + 2 * 2 * (64 * 256 + 256 * 64)),
    ],
)
def test_state_size_follows_the_documented_formula(name, fields, expected):
    model = ta.create_model(name, vocab_size=32, dim=64, depth=2, num_heads=1, **fields)
    assert script.state_size(model, 128) == expected


def test_a_tiny_sweep_records_rows_resumes_and_prints_the_table(tmp_path, monkeypatch, capsys):
    out = tmp_path / "rows.jsonl"
    argv = ["mqar_sweep.py", "--grid", "quick", "--models", "swa,gdn", "--settings", "16:2",
            "--lrs", "1e-3,3e-3", "--steps", "2", "--batch", "2", "--samples", "3",
            "--out", str(out)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    script.main()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["model"], r["lr"]) for r in rows] == [
        ("swa", 1e-3), ("swa", 3e-3), ("gdn", 1e-3), ("gdn", 3e-3)
    ]  # fmt: skip
    assert all(r["steps"] == 2 and r["batch"] == 2 and 0 <= r["accuracy"] <= 1 for r in rows)
    assert rows[2]["chunk"] == 1 and rows[0]["chunk"] is None  # gdn: the exact rule
    assert all(r["grid"] == "quick" and r["window"] == 16 and r["overrides"] == [] for r in rows)
    script.main()  # every run is there: nothing trains again
    assert len(out.read_text().splitlines()) == 4
    table = capsys.readouterr().out
    assert table.count("| 16 | 2 | swa | 64 |") == 2  # one best row per sweep call


def test_plot_draws_one_panel_per_setting_and_budget(tmp_path):
    pytest.importorskip("matplotlib")
    base = {"seq_len": 64, "pairs": 4, "width": 64, "seed": 0, "batch": 32, "window": 16,
            "overrides": [], "loss": 1.0, "val_accuracy": 0.5, "accuracy": 0.5}  # fmt: skip
    rows = [
        {**base, "model": model, "lr": 1e-3, "steps": steps, "state": state}
        for model, state in (("gdn", 8192), ("swa", 4096))
        for steps in (150, 600)
    ]
    script.plot(rows, tmp_path / "mqar.png")
    assert (tmp_path / "mqar.png").stat().st_size > 0


def test_rows_from_before_a_preset_moved_are_keyed_and_labelled_as_they_ran():
    """`omeganet`'s inner step moved on 2026-12-08: a row saved before (no ``inner_step``)
    ran at the earlier values, so today's preset does not count as already run, and the
    table says which step the old row had."""
    today = script.inner_step("omeganet", [])
    assert today == [0.1, 1.0]
    assert script.inner_step("omeganet", [], saved_before=True) == [0.02, 0.1]
    explicit = ["model.memory.lr_max=1.0", "model.memory.init_lr=0.1"]
    assert script.inner_step("omeganet", explicit, saved_before=True) == today
    assert script.inner_step("lmm", [], saved_before=True) == script.inner_step("lmm", [])
    assert script.inner_step("swa", []) is None
    old_row = {"model": "omeganet", "overrides": [], "output_init": 1.0, "inner_step": [0.02, 0.1]}
    assert script.label_of(old_row) == "omeganet init_lr=0.02 lr_max=0.1"
    assert script.label_of({**old_row, "inner_step": today}) == "omeganet"
    one_set = {**old_row, "overrides": ["model.memory.lr_max=0.5"], "inner_step": [0.02, 0.5]}
    assert script.label_of(one_set) == "omeganet lr_max=0.5 init_lr=0.02"  # each value once
