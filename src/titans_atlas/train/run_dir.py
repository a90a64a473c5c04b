"""Guards of a run directory (issue 37): a fresh run does not overwrite an earlier one
(``--resume`` continues it, ``--force`` starts over).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# What a run writes at the top of its directory; any of them means an earlier run is there.
# (control/: the recall run's control model, trained after it into RUN/control)
RUN_FILES = ("run_config.json", "metrics.jsonl", "checkpoints", "tensorboard", "control")


def check_writable_dir(name: str, path: str | Path) -> None:
    """``path`` is a directory, or can be created as one, and is writable; ValueError naming
    ``name`` otherwise. Creates nothing (a refused command leaves no empty folder behind)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{name}={str(path)!r} is a file, not a directory")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{name}={str(path)!r} cannot be created: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{name}={str(path)!r} is not writable ({existing} denies writing)")


def earlier_run(run_dir: str | Path) -> list[str]:
    """The files of an earlier run in ``run_dir`` (empty: a fresh directory)."""
    return [name for name in RUN_FILES if (Path(run_dir) / name).exists()]


def check_fresh(run_dir: str | Path) -> None:
    """ValueError when ``run_dir`` holds an earlier run, naming both ways on."""
    found = earlier_run(run_dir)
    if found:
        raise ValueError(
            f"train.out_dir={str(run_dir)!r} already holds a run ({', '.join(found)}): "
            "pass --resume to continue it, or --force to start over in it (deleting its "
            "checkpoints, metrics and run_config), or choose another --out"
        )


def fresh_run(run_dir: Path, resume: bool | str, force: bool) -> str | None:
    """How this run treats what ``run_dir`` holds: None (it resumes the run there),
    "fresh" (nothing there) or "force" (an earlier run there, to be cleared). A fresh run
    into a directory holding another run is refused unless forced."""
    check_writable_dir("train.out_dir", run_dir)
    if resume and force:
        raise ValueError("--resume and --force exclude each other: continue the run or restart it")
    here = resume is True or (bool(resume) and _within(Path(resume), run_dir))
    if here:
        return None
    if force:
        return "force" if earlier_run(run_dir) else "fresh"
    check_fresh(run_dir)
    return "fresh"


def _within(path: Path, root: Path) -> bool:
    path, root = path.resolve(), root.resolve()
    return path == root or root in path.parents


def clear_earlier_run(run_dir: str | Path) -> None:
    """Delete what an earlier run wrote (``--force``); other files in the folder stay."""
    for name in earlier_run(run_dir):
        path = Path(run_dir) / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
