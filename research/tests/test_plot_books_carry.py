"""The books plot picks one setting's rows: the model, every override the setting names, and
no other model override (a run with one more model setting is another setting)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from plot_books_carry import MEMORY, STREAM, setting_rows


def row(model, overrides, seed=0, steps=600, **extra):
    return {"model": model, "overrides": overrides, "seed": seed, "steps": steps, **extra}


def test_setting_rows_picks_exactly_the_setting_sorted_by_seed():
    base = [*STREAM, "train.batch_size=16", "train.out_dir=runs/x"]
    rows = [
        row("lmm", [*base, *MEMORY], seed=3),
        row("lmm", [*base, *MEMORY], seed=1),
        row("lmm", [*base, *MEMORY, "model.memory.conv_kernel=4"], seed=2),  # another setting
        row("lmm", [*base, MEMORY[0]], seed=4),  # theta shares the spread: another setting
        row("lmm", [*base, *MEMORY], seed=5, steps=1800),  # another budget
        row("lmm", [*base, *MEMORY], seed=6, evaluated_only=True),  # a re-evaluation
        row("swa", base, seed=0),
    ]
    assert [r["seed"] for r in setting_rows(rows, "lmm", STREAM + MEMORY, 600)] == [1, 3]
    assert [r["seed"] for r in setting_rows(rows, "swa", STREAM, 600)] == [0]
