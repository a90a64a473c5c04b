"""Guards of a run directory (issue 37): a fresh run does not overwrite an earlier one
(``--resume`` continues it, ``--force`` starts over), one training at a time holds it (a lock
file), and a checkpoint pointer (``latest.json`` / ``best.json``) cannot lead outside its
run's checkpoints folder.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

from ..models.pretrained import CheckpointError
from ..validation import check_writable_dir

# What a run writes at the top of its directory; any of them means an earlier run is there.
# (control/: the recall run's control model, trained after it into RUN/control)
RUN_FILES = ("run_config.json", "metrics.jsonl", "checkpoints", "tensorboard", "control")
LOCK_FILE = ".train.lock"

try:  # flock where the OS has it: the kernel drops the lock of a process that died
    import fcntl
except ImportError:  # pragma: no cover - Windows: a pid file alone
    fcntl = None


def read_json_object(path: Path) -> dict | None:
    """A JSON object from ``path``; None when it is absent, unreadable or not an object (for
    readers that fall back, like rotation: a damaged ``best.json`` must not stop a save)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    return data if isinstance(data, dict) else None


def resolve_pointer(root: Path, name: str) -> Path | None:
    """The checkpoint folder that the pointer ``root/name`` names; None when there is no such
    pointer. CheckpointError naming the file when it is unreadable, lacks ``"dir"``, or its
    ``"dir"`` is not one folder name inside ``root`` (``..``, an absolute path, or a symlink
    that leads elsewhere): a pointer never sends resume, generate or eval out of its run."""
    path = root / name
    if not path.is_file():
        return None
    try:
        pointer = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"checkpoint pointer {path} is unreadable: {err}") from err
    target = pointer.get("dir") if isinstance(pointer, dict) else None
    if not isinstance(target, str) or not target:
        raise CheckpointError(
            f'checkpoint pointer {path} has no "dir" (the checkpoint folder it names, like '
            f'"step_00000100"): got {str(pointer)[:80]}'
        )
    if Path(target).is_absolute() or len(Path(target).parts) != 1 or target in (".", ".."):
        raise CheckpointError(
            f'checkpoint pointer {path}: "dir" must be one folder name inside {root} (like '
            f'"step_00000100"), got {target!r}'
        )
    if (root / target).resolve().parent != root.resolve():
        raise CheckpointError(
            f"checkpoint pointer {path} names {target!r}, a link that leads outside {root} "
            f"(to {(root / target).resolve()})"
        )
    return root / target


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
        _check_forced(Path(run_dir))  # before anything is built
        return "force" if earlier_run(run_dir) else "fresh"
    check_fresh(run_dir)
    return "fresh"


def _within(path: Path, root: Path) -> bool:
    path, root = path.resolve(), root.resolve()
    return path == root or root in path.parents


def _is_run_file(folder: str, name: str) -> bool:
    """Whether a training writes ``name`` into its run's ``folder``: checkpoints (step
    folders, pointers, saves in progress), TensorBoard's event files, or the recall preset's
    control run (a run directory of its own)."""
    if folder == "checkpoints":
        return name.startswith(("step_", ".tmp-", ".latest.json.", ".best.json.")) or name in (
            "latest.json",
            "best.json",
        )
    if folder == "tensorboard":
        return name.startswith("events.out.tfevents.")
    return name in RUN_FILES or name == LOCK_FILE  # control/


def _check_forced(run_dir: Path) -> None:
    """``--force`` deletes a run's folders (``checkpoints/``, ``tensorboard/``, ``control/``),
    not folders of the same names that hold something else: refused, nothing deleted."""
    for folder in ("checkpoints", "tensorboard", "control"):
        path = run_dir / folder
        if not path.is_dir() or path.is_symlink():
            continue
        for entry in sorted(path.iterdir()):
            if not _is_run_file(folder, entry.name):
                raise ValueError(
                    f"--force would delete {path}, which holds {entry.name!r}, not a "
                    "training's file: move it, or choose another --out"
                )
        if folder == "control":
            _check_forced(path)


def clear_earlier_run(run_dir: str | Path) -> None:
    """Delete what an earlier run wrote (``--force``); other files in the folder stay. A run
    folder holding anything a run does not write is refused, nothing deleted."""
    _check_forced(Path(run_dir))
    for name in earlier_run(run_dir):
        path = Path(run_dir) / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


class RunLock:
    """The lock of one training on a run directory: ``RUN/.train.lock`` holds the owner's pid
    and host. A lock whose process is gone is taken over with a message; a live one refuses
    with a ValueError naming the owner. Released (the file removed) by ``release()``."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self.fd: int | None = None

    def acquire(self) -> None:
        acquire = self._acquire_flock if fcntl is not None else self._acquire_exclusive
        while not acquire():  # the file was replaced between open and lock: try again
            pass

    def _acquire_flock(self) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise self._held(_read_owner(self.path)) from None
        try:  # a releasing owner unlinks the file: lock the one that is there now
            same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            return False
        self._take_over(_read_owner(self.path))
        self._write_owner(fd)
        return True

    def _acquire_exclusive(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            owner = _read_owner(self.path)
            if owner.get("host") == socket.gethostname() and not _alive(owner.get("pid")):
                self._take_over(owner)
                self.path.unlink(missing_ok=True)
                return False
            raise self._held(owner) from None
        self._write_owner(fd)
        return True

    def _write_owner(self, fd: int) -> None:
        owner = {"pid": os.getpid(), "host": socket.gethostname()}
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(owner) + "\n").encode())
        os.fsync(fd)
        self.fd = fd

    def _take_over(self, owner: dict[str, Any]) -> None:
        if owner:
            print(
                f"taking over the lock {self.path} of pid {owner.get('pid')} on "
                f"{owner.get('host')}: that process is no longer running",
                file=sys.stderr,
            )

    def _held(self, owner: dict[str, Any]) -> ValueError:
        who = f"pid {owner.get('pid')} on {owner.get('host')}" if owner else "another process"
        return ValueError(
            f"run directory {str(self.path.parent)!r} is in use by a training ({who}; lock "
            f"file {self.path}): wait for it to finish, stop it, or choose another --out"
        )

    def release(self) -> None:
        if self.fd is None:
            return
        self.path.unlink(missing_ok=True)  # while still locked: the next owner makes a new one
        os.close(self.fd)
        self.fd = None


def lock_run_dir(run_dir: Path, parallel: Any, fresh: bool) -> RunLock | None:
    """The main rank creates and locks the run directory (and, for a ``fresh`` run, checks
    again under the lock that no other run finished there meanwhile); every rank fails
    together if it cannot -- a rank left alone would wait in its first collective until the
    timeout. Returns the main rank's lock (None elsewhere)."""
    lock, refusal = None, None
    if parallel.main:
        lock = RunLock(run_dir)
        try:
            try:
                run_dir.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise ValueError(
                    f"train.out_dir={str(run_dir)!r} cannot be created: {err}"
                ) from err
            lock.acquire()
            if fresh:
                check_fresh(run_dir)
        except ValueError as err:
            lock.release()
            lock, refusal = None, err
    if parallel.any(refusal is not None):
        raise refusal or ValueError(f"rank 0 could not lock the run directory {run_dir}")
    return lock


def _read_owner(path: Path) -> dict[str, Any]:
    try:
        owner = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True
