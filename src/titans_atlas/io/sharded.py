"""Sharded checkpoints of distributed runs, written and read with torch.distributed.checkpoint
(DCP), and resuming any checkpoint in any world size.

Layout of a distributed run's checkpoint (a single process writes the layout in
``checkpoint.py``; ``latest.json`` / ``best.json`` / rotation are shared)::

    step_N/shards/shard-0000R-model-00001-of-00001.safetensors
                                    rank R-1's part of the model and AdamW tensors (DCP's
                                    safetensors storage: the JSON header says where each piece
                                    sits in the full tensor)
    step_N/rng/rank_0000R.safetensors            rank R's torch RNG (Python / NumPy as JSON)
    step_N/stream_state/rank_0000R.safetensors   stream mode: rank R's rows of the carried state
    step_N/model/                   the full model for load_model / titans generate
                                    (train.export_model; else `titans consolidate`)
    step_N/tokenizer/               the run's tokenizer (tokenizer_spec.json, ...)
    step_N/trainer_state.json       step, config, world size, data cursor, best loss,
                                    optimizer hyperparameters
    step_N/manifest.json            size and SHA-256 of every file (written last)

No pickle: DCP's default ``.distcp`` format keeps its index in a pickled ``.metadata`` file
(and pickles any non-tensor value), so the shards go through DCP's safetensors storage
(``HuggingFaceStorageWriter(save_distributed=True)``), which writes no ``.metadata``: the
reader rebuilds the index from the files' JSON headers. Only tensors go to DCP; the
optimizer's hyperparameters go to JSON.

Resharding: DCP reads each rank's slice of every tensor from whichever files hold it, so a
checkpoint of W ranks resumes in any other world size, FSDP2 or DDP, or in one process
without a process group. Stream states are rows: rank r takes global rows
[r B, (r + 1) B) from the files that hold them. A single-process checkpoint resumes in a
distributed run as full tensors that every rank shards for itself.
"""

from __future__ import annotations

import json
import math
import shutil
import warnings
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from ..models.backbone import LanguageModel
from ..models.pretrained import CheckpointError, config_meta, load_model, match_saved_config
from ..models.registry import build_model
from ..models.rows import concat_rows, take_rows
from ..models.state import ModelState
from . import training as single
from .state import load_state, save_state


class ProcessGroup(Protocol):
    """What the sharded format needs of the training's process group (``train.Parallel``)."""

    rank: int
    world_size: int
    main: bool

    def barrier(self) -> None: ...

    def gather_json(self, obj: Any) -> list[Any]: ...


SHARDS, RNG_DIR, STREAM_DIR, MODEL_DIR = "shards", "rng", "stream_state", "model"
TOKENIZER_DIR = "tokenizer"


def _rank_file(folder: str, rank: int) -> str:
    return f"{folder}/rank_{rank:05d}.safetensors"


# -- model and optimizer tensors through DCP -------------------------------------------------
def _state_dicts(model: LanguageModel, optimizer) -> tuple[dict, dict]:
    """(model, optimizer) state dicts keyed by parameter name, as DCP's helpers give them for
    a plain, DDP or FSDP2 model; a tied LM head is the embedding, so it is left out."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    if model.config.tie_embeddings:
        model_state.pop("head.weight", None)
    return model_state, optim_state


def _flat_tensors(model_state: dict, optim_state: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """The tensors DCP stores under flat keys, and the optimizer's non-tensor values."""
    tensors = {f"model.{name}": value for name, value in model_state.items()}
    scalars = {}
    for name, values in optim_state["state"].items():
        for key, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{name}.{key}"] = value
            else:
                scalars[f"{name}:{key}"] = value
    return tensors, {"param_groups": optim_state["param_groups"], "scalars": scalars}


def save_sharded(
    run_dir: str | Path,
    parallel: ProcessGroup,
    model: LanguageModel,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict[str, Any],
    *,
    tokenizer=None,
    stream_state: ModelState | None = None,
    keep_last: int = 2,
    val_loss: float | None = None,
    export_model: bool = True,
) -> Path:
    """Every rank writes its part of step ``trainer_state["step"]``; rank 0 publishes it
    atomically once all parts are in. Collective: every rank calls it."""
    import torch.distributed.checkpoint as dcp

    step, root = int(trainer_state["step"]), Path(run_dir) / single.CHECKPOINTS
    tmp = root / f".tmp-step_{step:08d}-sharded"
    if parallel.main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    parallel.barrier()
    tensors, optim_meta = _flat_tensors(*_state_dicts(model, optimizer))
    writer = dcp.HuggingFaceStorageWriter(str(tmp / SHARDS), save_distributed=True)
    dcp.save(tensors, storage_writer=writer)
    rng_tensors, rng_meta = single.rng_state()
    (tmp / RNG_DIR).mkdir(exist_ok=True)
    save_file(
        rng_tensors, str(tmp / _rank_file(RNG_DIR, parallel.rank)), {"rng": json.dumps(rng_meta)}
    )
    if stream_state is not None:
        save_state(stream_state, tmp / _rank_file(STREAM_DIR, parallel.rank))
    if parallel.main and tokenizer is not None:
        tokenizer.save(tmp / TOKENIZER_DIR)
    if export_model:
        _export_full_model(model, tmp / MODEL_DIR, parallel, tokenizer)
    parallel.barrier()
    manifest = _shared_manifest(tmp, parallel)
    final = root / f"step_{step:08d}"
    if parallel.main:
        state = {
            "format": single.FORMAT, "version": single.VERSION, "layout": "sharded",
            "world_size": parallel.world_size, **trainer_state, "optimizer": optim_meta,
            "model": config_meta(model.config),  # the shards have no config.json of their own
        }  # fmt: skip
        (tmp / single.STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
        manifest[single.STATE_FILE] = {"bytes": (tmp / single.STATE_FILE).stat().st_size}
        manifest[single.STATE_FILE]["sha256"] = single._digest(tmp / single.STATE_FILE)
        final = single.publish(tmp, manifest, step, keep_last=keep_last, val_loss=val_loss)
    parallel.barrier()
    return final


def _shared_manifest(tmp: Path, parallel: ProcessGroup) -> dict:
    """Sizes and SHA-256 of every file so far, each rank hashing every n-th file."""
    files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
    mine = {
        name: {"bytes": (tmp / name).stat().st_size, "sha256": single._digest(tmp / name)}
        for name in files[parallel.rank :: parallel.world_size]
    }
    return {k: v for part in parallel.gather_json(mine) for k, v in part.items()}


def _export_full_model(
    model: LanguageModel, directory: Path, parallel: ProcessGroup, tokenizer=None
) -> None:
    """Gather the full weights to rank 0 (collective) and write a model directory there."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    full = get_model_state_dict(model, options=options)
    if parallel.main:
        plain = build_model(model.config)
        plain.load_state_dict(full)
        plain.save_pretrained(str(directory))
        if tokenizer is not None:
            tokenizer.save(directory)


# -- resuming -----------------------------------------------------------------------------
def load_training_state(
    directory: Path,
    state: dict,
    parallel: ProcessGroup,
    model: LanguageModel,
    optimizer: torch.optim.Optimizer,
    rows: tuple[int, int],
) -> ModelState | None:
    """Load weights, optimizer and this rank's RNG from a checkpoint of either layout into
    this run's model (plain, DDP or FSDP2); returns this rank's ``rows`` (global ``[start,
    stop)``) of the carried stream state, or None."""
    try:
        if (directory / SHARDS).is_dir():
            _load_shards(directory, state, model, optimizer)
        else:
            _load_full(directory, state, model, optimizer)
    except (RuntimeError, ValueError, KeyError) as err:
        if isinstance(err, CheckpointError):
            raise
        raise CheckpointError(
            f"cannot restore the model / optimizer from {directory}: {err}"
        ) from err
    _load_rng(directory, state, parallel.rank)
    return load_stream_rows(directory, *rows)


def _load_shards(directory: Path, state: dict, model, optimizer) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    model_state, optim_state = _state_dicts(model, optimizer)
    tensors, _ = _flat_tensors(model_state, optim_state)
    _check_shards(directory / SHARDS)
    reader = dcp.HuggingFaceStorageReader(str(directory / SHARDS))
    stored = set(reader.read_metadata().state_dict_metadata)
    missing = sorted(k for k in tensors if k.startswith("model.") and k not in stored)
    if missing:
        raise CheckpointError(f"{directory} holds a different model: no {missing[:3]}")
    # a parameter that never had a gradient has no AdamW state in the checkpoint
    absent = {k for k in tensors if k not in stored}
    _dcp_load({k: v for k, v in tensors.items() if k not in absent}, reader, directory / SHARDS)
    meta = state["optimizer"]
    for key, value in meta["scalars"].items():
        name, field = key.rsplit(":", 1)
        optim_state["state"][name][field] = value
    for name in [n for n, values in optim_state["state"].items() if _all_absent(n, values, absent)]:
        del optim_state["state"][name]
    optim_state["param_groups"] = meta["param_groups"]
    set_state_dict(
        model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state,
        options=StateDictOptions(strict=False),  # the tied head is the embedding
    )  # fmt: skip


def _check_shards(folder: Path) -> None:
    """Every shard file's header readable, before DCP reads them: DCP logs a damaged header
    as a traceback before it fails."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder} holds no shard files (*.safetensors)")
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as handle:
                handle.keys()
        except (SafetensorError, OSError) as err:
            raise CheckpointError(f"shard file {path} is unreadable: {err}") from err


def _dcp_load(tensors: dict[str, torch.Tensor], reader, where: Path) -> None:
    """``dcp.load`` in place; without a process group it reads as one process (by design
    here: a 1-process resume or an export), so its warning saying so is dropped. DCP reports
    damaged or missing shards as assertions and runtime errors of many kinds: they become
    one CheckpointError naming the folder."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(tensors, storage_reader=reader)
    except CheckpointException as err:  # each rank's exception, without its traceback
        causes = "; ".join(f"{type(e).__name__}: {e}" for e, _ in err.failures.values())
        raise CheckpointError(f"cannot read the sharded tensors in {where}: {causes}") from None
    except (AssertionError, RuntimeError, KeyError, ValueError, OSError) as err:
        raise CheckpointError(f"cannot read the sharded tensors in {where}: {err}") from err


def _all_absent(name: str, values: dict, absent: set[str]) -> bool:
    keys = [f"optimizer.{name}.{k}" for k, v in values.items() if isinstance(v, torch.Tensor)]
    return bool(keys) and all(k in absent for k in keys)


def _load_full(directory: Path, state: dict, model, optimizer) -> None:
    """A single-process checkpoint: full tensors, keyed by name for DCP's setters (which
    shard them under FSDP2)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    saved = load_model(directory / MODEL_DIR)
    match_saved_config(directory, saved.config, model)
    native = single.optimizer_from_flat(
        load_file(str(directory / "optimizer.safetensors")), state["optimizer"]
    )
    name_of = {i: n for g in native["param_groups"] for i, n in zip(g["params"], g["names"])}
    optim_state = {
        "state": {name_of[i]: values for i, values in native["state"].items()},
        "param_groups": [{**g, "params": list(g["names"])} for g in native["param_groups"]],
    }
    set_state_dict(
        model, optimizer, model_state_dict=saved.state_dict(), optim_state_dict=optim_state,
        options=StateDictOptions(full_state_dict=True),
    )  # fmt: skip


def _load_rng(directory: Path, state: dict, rank: int) -> None:
    """This rank's RNG state; a rank the saving run did not have takes rank 0's."""
    path = directory / "rng.safetensors"
    try:
        if path.is_file():
            single.set_rng_state(load_file(str(path)), state.get("rng"))
            return
        path = directory / _rank_file(RNG_DIR, rank)
        if not path.is_file():
            path = directory / _rank_file(RNG_DIR, 0)
        with safe_open(str(path), framework="pt") as handle:
            meta = json.loads(handle.metadata()["rng"])
        single.set_rng_state(load_file(str(path)), meta)
    except (ValueError, KeyError, RuntimeError, TypeError, SafetensorError) as err:
        raise CheckpointError(f"cannot restore the RNG state from {path}: {err}") from err


def load_stream_rows(directory: Path, start: int, stop: int) -> ModelState | None:
    """Global rows ``[start, stop)`` of a checkpoint's carried stream state (one file, or one
    per saving rank, each holding an equal share of the rows in rank order)."""
    one_file = directory / "stream_state.safetensors"
    files = (
        [one_file] if one_file.is_file() else sorted((directory / STREAM_DIR).glob("*.safetensors"))
    )
    if not files:
        return None
    first, _ = load_state(files[0])
    per_file = first.batch_size
    if stop > per_file * len(files):
        raise CheckpointError(
            f"{directory} carries {per_file * len(files)} stream rows; this run needs {stop}"
        )
    lo, hi = start // per_file, math.ceil(stop / per_file)
    parts = [first if i == 0 else load_state(files[i])[0] for i in range(lo, hi)]
    whole = parts[0] if len(parts) == 1 else concat_rows(parts)
    offset = lo * per_file
    if (start - offset, stop - offset) == (0, whole.batch_size):
        return whole
    return take_rows(whole, start - offset, stop - offset)


# -- export -------------------------------------------------------------------------------
def write_consolidated(model: LanguageModel, directory: Path, out: Path) -> Path:
    """Load the sharded checkpoint ``directory``'s model tensors into ``model`` (built from
    the checkpoint's config) and write them as the model directory ``out`` (``config.json`` +
    one ``model.safetensors``) with the checkpoint's tokenizer files; returns ``out``."""
    import torch.distributed.checkpoint as dcp

    if not (directory / SHARDS).is_dir():
        raise CheckpointError(f"{directory} is not a sharded checkpoint (no {SHARDS}/)")
    weights = {f"model.{k}": v for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        weights.pop("model.head.weight")
    _check_shards(directory / SHARDS)
    _dcp_load(weights, dcp.HuggingFaceStorageReader(str(directory / SHARDS)), directory / SHARDS)
    model.load_state_dict({k.removeprefix("model."): v for k, v in weights.items()}, strict=False)
    model.save_pretrained(str(out))
    if (directory / TOKENIZER_DIR).is_dir():
        for path in (directory / TOKENIZER_DIR).iterdir():
            shutil.copy2(path, out / path.name)
    return out
