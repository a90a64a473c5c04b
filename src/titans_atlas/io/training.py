"""Training checkpoints: everything needed to continue a run bit for bit, with no pickle.

Layout of a run directory::

    RUN/run_config.json             the resolved RunConfig
    RUN/metrics.jsonl               one JSON object per logged step / evaluation
    RUN/checkpoints/latest.json     {"step": N, "dir": "step_00000N"}
    RUN/checkpoints/best.json       the same, plus "val_loss", for the best evaluation
    RUN/checkpoints/step_0000000N/
        model/                      a model directory: config.json, model.safetensors,
                                    tokenizer_spec.json (load_model / titans generate read it)
        optimizer.safetensors       AdamW moments and step counts ("state.<param>.<name>")
        rng.safetensors             torch CPU (and CUDA) generator states
        stream_state.safetensors    stream mode: the carried ModelState (state_io format)
        trainer_state.json          step, run config, data cursor, optimizer hyperparameters,
                                    Python and NumPy RNG states, best validation loss
        manifest.json               size and SHA-256 of every file above (written last)

A checkpoint is written into a temporary directory and renamed into place, then
``latest.json`` is replaced atomically, so a crash mid-save leaves the previous checkpoint
the latest one. The last ``keep_last`` checkpoints and the best one are kept.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..layers.memory_config import INIT_ONLY_FIELDS
from ..models.backbone import LanguageModel
from ..models.pretrained import CheckpointError, load_model, match_saved_config
from .run_dir import read_json_object, resolve_pointer
from .state import load_state, save_state

CHECKPOINTS, LATEST, BEST, MANIFEST = "checkpoints", "latest.json", "best.json", "manifest.json"
STATE_FILE, FORMAT, VERSION = "trainer_state.json", "titans-atlas-train", 1


class CheckpointWriteError(CheckpointError, OSError):
    """A checkpoint that could not be written (a full disk); the previous one is intact. An
    OSError too, as the failed write it reports."""


def _write_json(path: Path, data: Any) -> None:
    """Atomic: a reader sees the old file or the new one, never half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def optimizer_to_flat(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    state = optimizer.state_dict()
    tensors, scalars = {}, {}
    for index, values in state["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{name}"] = value.detach().contiguous()
            else:
                scalars[f"{index}.{name}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def optimizer_from_flat(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    scalars, groups = meta.get("scalars"), meta.get("param_groups")
    if not isinstance(scalars, dict) or not all(isinstance(k, str) for k in scalars):
        raise ValueError('"optimizer.scalars" must be an object of "index.name" keys')
    if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) for g in groups):
        raise ValueError('"optimizer.param_groups" must be a non-empty list of objects')
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    for key, value in meta["scalars"].items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def rng_state() -> tuple[dict[str, torch.Tensor], dict]:
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda.{i}"] = s
    version, mt, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return tensors, {
        "python": [version, list(mt), gauss],
        "numpy": [name, keys.tolist(), pos, has_gauss, cached],
    }


def _check_rng_meta(meta: Any) -> None:
    """The saved Python and NumPy generator states have the shapes ``rng_state`` writes
    (a file's values reach ``random.setstate``, which fails on others with a bare TypeError)."""

    def integers(value: Any) -> bool:
        return isinstance(value, list) and all(type(x) is int for x in value)

    python = meta.get("python") if isinstance(meta, dict) else None
    numpy = meta.get("numpy") if isinstance(meta, dict) else None
    if not (
        isinstance(python, list)
        and len(python) == 3
        and type(python[0]) is int
        and integers(python[1])
        and (python[2] is None or isinstance(python[2], float))
    ):
        raise ValueError('"rng.python" must be [version, [624 + 1 integers], gauss or null]')
    if not (
        isinstance(numpy, list)
        and len(numpy) == 5
        and isinstance(numpy[0], str)
        and integers(numpy[1])
        and all(type(x) is int for x in numpy[2:4])
        and isinstance(numpy[4], int | float)
    ):
        raise ValueError('"rng.numpy" must be [name, [integers], pos, has_gauss, cached]')


def set_rng_state(tensors: dict[str, torch.Tensor], meta: dict) -> None:
    _check_rng_meta(meta)
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[k] for k in sorted(tensors) if k.startswith("cuda.")]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    version, mt, gauss = meta["python"]
    random.setstate((version, tuple(mt), gauss))
    name, keys, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def save_checkpoint(
    run_dir: str | Path,
    model: LanguageModel,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict[str, Any],
    *,
    tokenizer=None,
    stream_state=None,
    keep_last: int = 2,
    val_loss: float | None = None,
) -> Path:
    """Write a checkpoint for ``trainer_state["step"]`` atomically; returns its directory."""
    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    step = int(trainer_state["step"])
    name = f"step_{step:08d}"
    tmp = root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _write_files(tmp, model, optimizer, trainer_state, tokenizer, stream_state)
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        manifest = {
            str(p.relative_to(tmp)): {"bytes": p.stat().st_size, "sha256": _digest(p)}
            for p in files
        }
        return publish(tmp, manifest, step, keep_last=keep_last, val_loss=val_loss)
    except (OSError, SafetensorError) as err:  # a full disk: keep the last good checkpoint
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointWriteError(
            f"cannot write the checkpoint of step {step} into {root}: {err}. The previous "
            f"checkpoint ({LATEST}) is untouched: free space, then continue with --resume"
        ) from err


def _write_files(tmp: Path, model, optimizer, trainer_state: dict, tokenizer, stream_state) -> None:
    model.save_pretrained(str(tmp / "model"))
    if tokenizer is not None:
        tokenizer.save(tmp / "model")
    opt_tensors, opt_meta = optimizer_to_flat(optimizer)
    save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
    rng_tensors, rng_meta = rng_state()
    save_file(rng_tensors, str(tmp / "rng.safetensors"))
    if stream_state is not None:
        save_state(stream_state, tmp / "stream_state.safetensors")
    state = {
        "format": FORMAT,
        "version": VERSION,
        **trainer_state,
        "optimizer": opt_meta,
        "rng": rng_meta,
    }
    (tmp / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


def publish(
    tmp: Path, manifest: dict, step: int, *, keep_last: int, val_loss: float | None
) -> Path:
    """Write ``manifest.json`` last, rename the finished ``tmp`` into place as ``step``'s
    checkpoint, move the latest / best pointers and rotate old checkpoints."""
    root, name = tmp.parent, f"step_{step:08d}"
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    final = root / name
    if final.exists():  # the same step written again (a resumed run): swap it out
        shutil.rmtree(final)
    os.rename(tmp, final)
    _write_json(root / LATEST, {"step": step, "dir": name})
    best = (read_json_object(root / BEST) or {}).get("val_loss")
    best = best if isinstance(best, int | float) and math.isfinite(best) else math.inf
    if val_loss is not None and val_loss < best:
        _write_json(root / BEST, {"step": step, "dir": name, "val_loss": val_loss})
    _rotate(root, keep_last)
    return final


def _rotate(root: Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` checkpoints, the best one, and temp dirs."""
    keep = {(read_json_object(root / p) or {}).get("dir") for p in (LATEST, BEST)}
    steps = sorted(p.name for p in root.glob("step_*") if p.is_dir())
    keep.update(steps[-max(keep_last, 1) :])
    for name in steps:
        if name not in keep:
            shutil.rmtree(root / name, ignore_errors=True)
    for tmp in root.glob(".tmp-*"):
        if tmp.is_dir() and not tmp.name.endswith(f"-{os.getpid()}"):
            shutil.rmtree(tmp, ignore_errors=True)


def verify_checkpoint(directory: str | Path, part: tuple[int, int] = (0, 1)) -> dict:
    """The trainer state of a complete, intact checkpoint; CheckpointError otherwise.
    ``part=(i, n)`` checks every file's size but hashes only every n-th file from the i-th
    (the n ranks of a job share the work)."""
    directory = Path(directory)
    manifest = read_json_object(directory / MANIFEST)
    if manifest is None:
        raise CheckpointError(
            f"{directory} is not a complete training checkpoint (no readable {MANIFEST})"
        )
    for index, (name, entry) in enumerate(sorted(manifest.items())):
        path = directory / name
        if ".." in Path(name).parts or Path(name).is_absolute():
            raise CheckpointError(f"{directory / MANIFEST} lists {name!r} outside the checkpoint")
        if not isinstance(entry, dict):
            raise CheckpointError(f"{directory / MANIFEST}: the entry of {name!r} is not a table")
        if not path.is_file() or path.stat().st_size != entry.get("bytes"):
            raise CheckpointError(f"checkpoint file {path} is missing or truncated")
        if index % part[1] == part[0] and _digest(path) != entry.get("sha256"):
            raise CheckpointError(f"checkpoint file {path} is corrupt (SHA-256 mismatch)")
    state = read_json_object(directory / STATE_FILE)
    if not state or state.get("format") != FORMAT or state.get("version") != VERSION:
        raise CheckpointError(f"{directory / STATE_FILE} is not a {FORMAT} v{VERSION} state")
    _check_trainer_state(state, directory)
    return state


def _check_trainer_state(state: dict, directory: Path) -> None:
    """The values a resume trusts: a step >= 0 (the one its folder is named for), a config
    and data cursor, and a finite best loss or none."""
    where, step = directory / STATE_FILE, state.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(f"{where}: step must be an integer >= 0, got {step!r}")
    named = directory.name.removeprefix("step_")
    if directory.name.startswith("step_") and named.isdigit() and int(named) != step:
        raise CheckpointError(f"{where}: step {step} is not the step of its folder {named}")
    for key in ("config", "data", "optimizer"):
        if not isinstance(state.get(key), dict):
            raise CheckpointError(f"{where}: {key!r} must be a JSON object")
    best = state.get("best_val_loss")
    if best is not None and not (isinstance(best, int | float) and math.isfinite(best)):
        raise CheckpointError(f"{where}: best_val_loss must be a finite number or null")


def load_checkpoint(
    directory: str | Path, model: LanguageModel, optimizer: torch.optim.Optimizer
) -> tuple[dict, Any]:
    """Load weights, optimizer and RNG states in place; returns (trainer state, carried
    stream state or None). The caller compares configs first (``resume_state``)."""
    directory = Path(directory)
    state = verify_checkpoint(directory)
    saved = load_model(directory / "model")
    match_saved_config(directory, saved.config, model)
    model.load_state_dict(saved.state_dict())
    try:
        optimizer.load_state_dict(
            optimizer_from_flat(
                load_file(str(directory / "optimizer.safetensors")), state["optimizer"]
            )
        )
        set_rng_state(load_file(str(directory / "rng.safetensors")), state["rng"])
    except (SafetensorError, ValueError, KeyError, RuntimeError) as err:
        raise CheckpointError(
            f"cannot restore the optimizer / RNG state from {directory}: {err}"
        ) from err
    stream = None
    if (directory / "stream_state.safetensors").is_file():
        stream, _ = load_state(directory / "stream_state.safetensors")
    return state, stream


def find_checkpoint(path: str | Path, which: str = "latest") -> Path:
    """A checkpoint directory from a run directory (its latest/best) or itself."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        return path
    for root in (path / CHECKPOINTS, path):
        target = resolve_pointer(root, BEST if which == "best" else LATEST)
        if target is not None:
            return target
    pointer = BEST if which == "best" else LATEST
    if (path / CHECKPOINTS).is_dir():  # a run whose pointer is missing: say which
        raise CheckpointError(
            f"{path / CHECKPOINTS} has no {pointer}"
            + (" (no evaluation has run: drop --best)" if which == "best" else "")
        )
    raise CheckpointError(f"{path} is neither a run directory nor a training checkpoint")


def resolve_model_dir(path: str | Path, which: str = "latest") -> Path:
    """The model directory behind ``path``: a model directory itself, a training checkpoint
    (its ``model/``), or a run directory (the ``which`` = latest / best checkpoint's model)."""
    path = Path(path)
    single = (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    if which == "best" and (single or (path / MANIFEST).is_file()):
        raise CheckpointError(f"{path} is one model, not a run directory: --best picks a run's")
    if single:
        return path
    if (path / "model" / "config.json").is_file():
        return _model_inside(path)
    checkpoint = find_checkpoint(path, which)
    if not (checkpoint / "model").is_dir() and (checkpoint / "shards").is_dir():
        raise CheckpointError(
            f"{checkpoint} holds sharded weights only (train.export_model=false): write its "
            f"model directory with `titans consolidate {checkpoint}`"
        )
    return _model_inside(checkpoint)


def _model_inside(checkpoint: Path) -> Path:
    """``checkpoint``'s ``model/``, which must not be a link to a folder elsewhere."""
    model = checkpoint / "model"
    if model.resolve().parent != checkpoint.resolve():
        raise CheckpointError(f"{model} is a link that leads outside {checkpoint}")
    return model


def load_initial_weights(model: LanguageModel, source: str | Path, run_dir: Path) -> None:
    """Copy the weights saved at ``source`` (a run directory's latest checkpoint, a training
    checkpoint or a model directory) into ``model``; ValueError naming ``train.init_from``
    when the saved model config differs from the model's, or when ``source`` lies in the new
    run's directory (its checkpoints would replace the ones it starts from)."""
    check_init_outside_run(source, run_dir)
    try:
        saved = load_model(resolve_model_dir(source))
    except CheckpointError as err:
        raise ValueError(f"train.init_from={str(source)!r}: {err}") from err
    theirs, ours = _flat_config(saved.config.to_dict()), _flat_config(model.config.to_dict())
    differ = sorted(k for k in ours | theirs if theirs.get(k) != ours.get(k) and not _may_differ(k))
    if differ:
        listed = ", ".join(f"{k}: saved {theirs.get(k)!r}, run {ours.get(k)!r}" for k in differ)
        raise ValueError(f"train.init_from={str(source)!r} holds another model ({listed})")
    weights = saved.state_dict()
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            tensor.copy_(weights[name])


def check_init_outside_run(source: str | Path, run_dir: str | Path) -> None:
    """ValueError when ``train.init_from`` lies in the new run's directory (its checkpoints
    would replace the ones it starts from)."""
    where, run_dir = Path(source).resolve(), Path(run_dir).resolve()
    if where == run_dir or run_dir in where.parents:
        raise ValueError(
            f"train.init_from={str(source)!r} lies in train.out_dir={str(run_dir)!r}: the new "
            "run would overwrite it; give the fine-tuning run another out_dir"
        )


def _may_differ(key: str) -> bool:
    """Config keys a fine-tuning run may change: ``init_*`` and ``INIT_ONLY_FIELDS`` only set
    starting values of parameters, which the copy overwrites, and ``decay_min`` is a bound
    on the decay gate, not a weight (research/LOG.md: fine-tuning with the floor lowered)."""
    name = key.rsplit(".", 1)[-1]
    return "init_" in key or name in INIT_ONLY_FIELDS or name == "decay_min"


def _flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"memory": {"lr_max": 0.1}}`` -> ``{"memory.lr_max": 0.1}``."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat |= _flat_config(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat
