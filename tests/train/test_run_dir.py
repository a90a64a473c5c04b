"""The run directory's guards (issue 37): a fresh run never overwrites an earlier one, two
trainings never share one, and checkpoint pointers stay inside their run."""

import hashlib
from pathlib import Path

import pytest

from titans_atlas.cli import main

QUIET = ["--set=train.threads=1", "--set=train.progress=false", "--set=train.sample_tokens=0"]
TINY = ["--set=train.eval_tokens=256", "--set=train.batch_size=2", "--set=train.seq_len=32"]


def titans_train(out: Path, *extra: str) -> int:
    return main(
        ["train", "--preset", "debug", "--out", str(out), "--steps", "1", *QUIET, *TINY, *extra]
    )


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` by its path, with its SHA-256 (and every folder)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else "dir"
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("earlier") / "run"
    assert titans_train(run) == 0
    return run


def test_a_fresh_run_into_an_earlier_one_is_refused_and_changes_nothing(earlier, capsys):
    before = tree(earlier)
    assert titans_train(earlier) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and "--force" in err and str(earlier) in err
    assert tree(earlier) == before


def test_force_starts_over_and_resume_continues(earlier, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(earlier, run)
    (run / "notes.txt").write_text("mine")
    assert titans_train(run, "--resume", "--force") == 2
    assert "exclude" in capsys.readouterr().err
    assert titans_train(run, "--steps", "2", "--resume") == 0
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == [
        "step_00000001",
        "step_00000002",
    ]
    assert titans_train(run, "--force") == 0
    assert [p.name for p in (run / "checkpoints").glob("step_*")] == ["step_00000001"]
    assert (run / "notes.txt").read_text() == "mine"  # only what a run writes is cleared


@pytest.mark.parametrize("kind", ["file", "under-a-file"])
def test_an_out_that_cannot_be_a_directory_is_one_clear_line(tmp_path, capsys, kind):
    (tmp_path / "f").write_text("x")
    out = tmp_path / "f" if kind == "file" else tmp_path / "f" / "run"
    assert titans_train(out) == 2
    err = capsys.readouterr().err
    assert "train.out_dir" in err and "Traceback" not in err
    assert (tmp_path / "f").read_text() == "x"
