"""The run directory's guards (issue 37): a fresh run never overwrites an earlier one, two
trainings never share one, and checkpoint pointers stay inside their run."""

import hashlib
import os
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


def test_a_live_lock_refuses_a_second_training(tmp_path, capsys):
    from titans_atlas.train.run_dir import RunLock

    run = tmp_path / "run"
    run.mkdir()
    holder = RunLock(run)
    holder.acquire()  # another training (flock: a second open file conflicts, same process too)
    try:
        before = tree(run)
        assert titans_train(run) == 2
        err = capsys.readouterr().err
        assert "in use" in err and str(os.getpid()) in err and ".train.lock" in err
        assert tree(run) == before
    finally:
        holder.release()
    assert not (run / ".train.lock").exists()


def test_a_dead_process_lock_is_taken_over_with_a_message(tmp_path, capsys):
    import json
    import socket
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    run = tmp_path / "run"
    run.mkdir()
    owner = {"pid": gone.pid, "host": socket.gethostname()}
    (run / ".train.lock").write_text(json.dumps(owner))
    assert titans_train(run) == 0
    err = capsys.readouterr().err
    assert f"taking over the lock {run / '.train.lock'} of pid {gone.pid}" in err
    assert not (run / ".train.lock").exists()  # released at the end


def test_the_lock_is_released_when_training_fails(tmp_path, monkeypatch, capsys):
    from titans_atlas.train.loop import Trainer

    def fail(*args, **kwargs):
        assert (tmp_path / "run" / ".train.lock").is_file()  # held while training
        raise ValueError("boom")

    monkeypatch.setattr(Trainer, "_run_steps", fail)
    assert titans_train(tmp_path / "run") == 2
    assert "boom" in capsys.readouterr().err
    assert not (tmp_path / "run" / ".train.lock").exists()


def test_without_flock_the_pid_file_alone_guards_the_directory(tmp_path, monkeypatch, capsys):
    import json
    import socket
    import subprocess
    import sys

    from titans_atlas.train import run_dir

    monkeypatch.setattr(run_dir, "fcntl", None)  # as on Windows
    first = run_dir.RunLock(tmp_path)
    first.acquire()
    with pytest.raises(ValueError, match="in use"):
        run_dir.RunLock(tmp_path).acquire()
    first.release()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    owner = {"pid": gone.pid, "host": socket.gethostname()}
    (tmp_path / ".train.lock").write_text(json.dumps(owner))
    second = run_dir.RunLock(tmp_path)
    second.acquire()
    assert f"of pid {gone.pid}" in capsys.readouterr().err
    assert json.loads((tmp_path / ".train.lock").read_text())["pid"] == os.getpid()
    second.release()
