"""The run directory's guards (issue 37): a fresh run never overwrites an earlier one, two
trainings never share one, and checkpoint pointers stay inside their run."""

import hashlib
import os
import re
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
    from titans_atlas.io.run_dir import RunLock

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

    from titans_atlas.io import run_dir

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


def _pointer_cases(outside: Path) -> dict[str, object]:
    return {
        "dotdot": {"step": 1, "dir": "../../outside/step_00000001"},
        "absolute": {"step": 1, "dir": str(outside / "step_00000001")},
        "parent": {"step": 1, "dir": ".."},
        "no-dir": {"step": 1},
        "not-an-object": [1, 2],
        "symlink": "link",
        "not-json": "{",
    }


@pytest.fixture
def hostile_run(earlier, tmp_path, request):
    """A copy of the earlier run whose latest.json (and best.json) is hostile, and beside it
    a complete checkpoint outside the run that an escaping pointer would reach."""
    import json
    import shutil

    run, outside = tmp_path / "run", tmp_path / "outside"
    shutil.copytree(earlier, run)
    shutil.copytree(earlier / "checkpoints" / "step_00000001", outside / "step_00000001")
    pointer = _pointer_cases(outside)[request.param]
    if pointer == "link":
        (run / "checkpoints" / "step_00000009").symlink_to(outside / "step_00000001")
        pointer = {"step": 9, "dir": "step_00000009"}
    for name in ("latest.json", "best.json"):
        path = run / "checkpoints" / name
        if isinstance(pointer, str):
            path.write_text(pointer)
        else:
            path.write_text(json.dumps(pointer))
    return run


CASES = list(_pointer_cases(Path("/x")))


@pytest.mark.parametrize("hostile_run", CASES, indirect=True)
@pytest.mark.parametrize("which", ["latest", "best"])
def test_pointers_that_leave_the_run_are_refused(hostile_run, which):
    from titans_atlas.eval.loading import load_checkpoint
    from titans_atlas.io import CheckpointError
    from titans_atlas.train import find_checkpoint, resolve_model_dir

    for call in (
        lambda: find_checkpoint(hostile_run, which),
        lambda: resolve_model_dir(hostile_run, which),
    ):
        with pytest.raises(CheckpointError, match=rf"{which}\.json"):
            call()
    if which == "latest":
        with pytest.raises(CheckpointError, match=r"latest\.json"):
            load_checkpoint(hostile_run)


@pytest.mark.parametrize("hostile_run", ["dotdot", "symlink", "no-dir"], indirect=True)
def test_resume_generate_and_eval_refuse_an_escaping_pointer(hostile_run, capsys):
    before = tree(hostile_run)
    assert titans_train(hostile_run, "--steps", "2", "--resume") == 2
    assert "latest.json" in capsys.readouterr().err
    args = ["--checkpoint", str(hostile_run)]
    assert main(["generate", *args, "--prompt", "x", "--max-new-tokens", "2"]) == 2
    assert "latest.json" in capsys.readouterr().err
    assert main(["eval", *args, "--task", "mqar", "--out", str(hostile_run.parent / "e")]) == 2
    assert "latest.json" in capsys.readouterr().err
    assert tree(hostile_run) == before


def test_a_manifest_naming_files_outside_its_checkpoint_is_refused(earlier, tmp_path):
    import json
    import shutil

    from titans_atlas.io import CheckpointError
    from titans_atlas.io.training import verify_checkpoint

    step = tmp_path / "step"
    shutil.copytree(earlier / "checkpoints" / "step_00000001", step)
    (tmp_path / "secret").write_text("s")
    manifest = json.loads((step / "manifest.json").read_text())
    verify_checkpoint(step)
    manifest["../secret"] = {"bytes": 1, "sha256": "0" * 64}
    (step / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="outside the checkpoint"):
        verify_checkpoint(step)


@pytest.mark.parametrize(
    "change, named",
    [
        ({"step": -3}, "step must be an integer >= 0"),
        ({"step": 2}, "not the step of its folder"),
        ({"step": 1.5}, "step must be an integer"),
        ({"data": [1]}, "'data' must be a JSON object"),
        ({"best_val_loss": "low"}, "best_val_loss"),
    ],
)
def test_a_trainer_state_with_nonsense_numbers_is_refused(earlier, tmp_path, change, named):
    import json
    import shutil

    from titans_atlas.io import CheckpointError
    from titans_atlas.io.training import verify_checkpoint

    step = tmp_path / "step_00000001"
    shutil.copytree(earlier / "checkpoints" / "step_00000001", step)
    state = json.loads((step / "trainer_state.json").read_text())
    (step / "trainer_state.json").write_text(json.dumps({**state, **change}))
    manifest = json.loads((step / "manifest.json").read_text())
    manifest["trainer_state.json"] = {  # a consistent manifest: only the values are wrong
        "bytes": (step / "trainer_state.json").stat().st_size,
        "sha256": hashlib.sha256((step / "trainer_state.json").read_bytes()).hexdigest(),
    }
    (step / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=re.escape(named)):
        verify_checkpoint(step)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda s: s.update(rng=None), '"rng.python"'),
        (lambda s: s["rng"].update(python=5), '"rng.python"'),
        (lambda s: s["rng"].update(numpy="x"), '"rng.numpy"'),
        (lambda s: s["optimizer"].update(param_groups="x"), '"optimizer.param_groups"'),
        (lambda s: s["optimizer"].update(param_groups=[]), '"optimizer.param_groups"'),
        (lambda s: s["optimizer"].update(scalars=[1]), '"optimizer.scalars"'),
    ],
)
def test_a_resume_from_a_malformed_optimizer_or_rng_state_is_a_clear_error(
    earlier, tmp_path, capsys, change, named
):
    # the file's values reach random.setstate and the optimizer: wrong types used to be
    # tracebacks (TypeError, AttributeError) or messages such as "...: 0"
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(earlier, run)
    step = run / "checkpoints" / "step_00000001"
    state = json.loads((step / "trainer_state.json").read_text())
    change(state)
    (step / "trainer_state.json").write_text(json.dumps(state))
    manifest = json.loads((step / "manifest.json").read_text())
    manifest["trainer_state.json"] = {
        "bytes": (step / "trainer_state.json").stat().st_size,
        "sha256": hashlib.sha256((step / "trainer_state.json").read_bytes()).hexdigest(),
    }
    (step / "manifest.json").write_text(json.dumps(manifest))
    assert titans_train(run, "--resume", "--steps", "2") == 2
    err = capsys.readouterr().err
    assert named in err and str(step) in err and "Traceback" not in err


def test_resuming_with_fewer_steps_than_done_is_refused(earlier, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(earlier, run)
    assert titans_train(run, "--resume", "--steps", "2") == 0
    before = tree(run)
    assert titans_train(run, "--resume", "--steps", "1") == 2  # used to do nothing, silently
    assert "train.steps (1 is below the saved step 2)" in capsys.readouterr().err
    assert tree(run) == before
