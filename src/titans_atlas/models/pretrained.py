"""Save and load models: ``config.json`` (the ModelConfig) beside ``model.safetensors``.

No pickle anywhere: weights go through safetensors, the config through JSON. Every tensor
keeps its dtype (a bf16 model reloads as bf16). A checkpoint is refused, with a
``CheckpointError`` naming the problem, when a file is missing or corrupt, the config lacks
a key or holds a bad value, or a tensor is missing, unexpected, not floating point or not
finite.

Format versions: 9 (written now) holds the architecture only, the memory's stability fields,
``omega_gate_source``, ``timescale_ratio``, ``timescale_lr_ratio``, the MAC options
(``mac_memory_input``, ``mac_context_norm``, ``mac_gate``) and the MAG option (``mag_gate``)
included. 8 predates ``mac_gate``: read as the papers' MAC gate ("memory"). 7 predates
``timescale_lr_ratio``: read as None (theta shares alpha's timescales). 6 predates
``timescale_ratio``: read as 1 (every head the same bounds). 5 predates the MAG option: read as
the papers' MAG ("memory"). 4 predates the MAC options: read as the papers' MAC ("attention",
no norm). 3 predates ``omega_gate_source``: its Omega gates were all taken from the step's
token, so it is read as "step". 2 predates the stability fields (``momentum_max``,
``decay_min``, ``max_grad_norm``, ``decay_target``); it is read with the values that reproduce
the function it was trained as -- unbounded gates, no clip, decay toward zero
(``UNBOUNDED_GATES``) -- not with today's defaults, which would silently change a trained
model. 1 also held ``muon``, ``impl`` and ``checkpoint`` in the memory config, read as
``update_rule`` with the two run-time choices dropped (set them with ``model.set_runtime``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from safetensors.torch import save_model as save_safetensors
from torch import nn

from ..layers.memory_config import (
    FORMAT_7_FIELDS,
    FORMAT_8_FIELDS,
    GATE_INIT_FIELDS,
    INIT_ONLY_BEFORE,
    INIT_ONLY_FIELDS,
    LATER_FIELDS,
    UNBOUNDED_GATES,
    MemoryConfig,
)
from .config import MAC_FIELDS, MAC_GATE_FIELDS, MAG_FIELDS, ModelConfig
from .registry import MODELS, build_model

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
FORMAT = "titans-atlas"
FORMAT_VERSION = 9
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9)
_V1_UPDATE_RULES = {False: "momentum", True: "muon", "token": "muon", "chunk": "muon_chunk"}


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded (missing or corrupt file, unknown model)."""


def save_model(model: nn.Module, directory: str | Path) -> None:
    """Write ``model``'s config and weights into ``directory`` (created if needed). Refuses a
    model whose weights could not be loaded back (not finite, or on the meta device)."""
    if not (isinstance(model, torch.nn.Module) and hasattr(model, "tie_weights")):
        raise ValueError(f"model must be a LanguageModel, got {type(model).__name__}")
    directory = _as_path(directory)
    _check_tensors(dict(model.named_parameters()), "model", ValueError)
    directory.mkdir(parents=True, exist_ok=True)
    meta = config_meta(model.config)
    (directory / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    # tied weights are stored once; the metadata guards against loading under another model
    save_safetensors(model, str(directory / WEIGHTS_FILE), metadata={"model": model.config.name})


def load_model(
    directory: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
) -> nn.Module:
    """Rebuild a model saved by ``save_pretrained`` on ``device`` (``"meta"`` gives shapes
    only), in the saved dtypes or cast to floating ``dtype``; raises CheckpointError on a bad
    directory and ValueError on a bad argument."""
    directory = _as_path(directory)
    device = _as_device(device)
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"dtype must be a floating torch.dtype or None, got {dtype!r}")
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    for path in (config_path, weights_path):
        if not path.is_file():
            raise CheckpointError(f"checkpoint is missing {path}")
        if not _held_by(directory, path):
            raise CheckpointError(
                f"{path} is a link that leads outside {directory} (to {path.resolve()}): "
                "copy the file into the folder"
            )
    config = read_config(config_path)
    saved_as = _weights_model_name(weights_path)
    if saved_as is not None and saved_as != config.name:
        raise CheckpointError(
            f"{weights_path} holds a {saved_as!r} model, config says {config.name!r}"
        )
    with torch.device("meta"):  # shapes only: the loaded tensors become the parameters
        model = build_model(config)
    tensors = _read_weights(weights_path)
    _check_tensors(tensors, str(weights_path), CheckpointError)
    model.load_state_dict(_complete_state_dict(model, tensors, weights_path), assign=True)
    model = model.to(device=device, dtype=dtype)
    model.tie_weights()  # assign= and a move across device types replace tied Parameters
    return model


def _held_by(directory: Path, path: Path) -> bool:
    """Whether ``path`` (a file of ``directory``) is the folder's own: a file in it, or a
    link to one, or -- the Hugging Face hub cache's layout -- a link from a snapshot
    (``REPO/snapshots/REV/``) to the same repository's ``REPO/blobs/``. Any other link
    would read a file from elsewhere under the model's name."""
    folder, target = directory.resolve(), path.resolve()
    if target.parent == folder:
        return True
    return folder.parent.name == "snapshots" and target.parent == folder.parent.parent / "blobs"


def _as_path(directory: Any) -> Path:
    if not isinstance(directory, str | Path):
        raise ValueError(f"directory must be a str or Path, got {type(directory).__name__}")
    return Path(directory)


def _as_device(device: Any) -> torch.device:
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must name a torch device, got {device!r}") from err


WEIGHT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _check_tensors(tensors: dict[str, torch.Tensor], where: str, error: type) -> None:
    """Every tensor floating point, materialised and finite (one pass, before any use)."""
    for name, tensor in tensors.items():
        if tensor.dtype not in WEIGHT_DTYPES:  # float8 and friends: no isfinite, no matmul
            raise error(
                f"{where}: tensor {name!r} has dtype {tensor.dtype}; weights are one of "
                f"{', '.join(str(d).removeprefix('torch.') for d in WEIGHT_DTYPES)}"
            )
        if tensor.is_meta:
            raise error(f"{where}: tensor {name!r} is on the meta device (no values to save)")
        if not torch.isfinite(tensor).all():
            raise error(f"{where}: tensor {name!r} holds NaN or inf")


def _complete_state_dict(model: nn.Module, tensors: dict, path: Path) -> dict:
    """The file's tensors under every name the model uses: tied parameters are stored once
    under one of their names. Raises CheckpointError naming missing and unexpected tensors."""
    aliases: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(param), []).append(name)
    state, missing = {}, []
    for names in aliases.values():
        present = [n for n in names if n in tensors]
        if not present:
            missing.append(" = ".join(names))
            continue
        if len(present) > 1:
            raise CheckpointError(
                f"{path} does not match the config: {present} are separate tensors, the "
                "config ties them (tie_embeddings)"
            )
        state.update(dict.fromkeys(names, tensors[present[0]]))
    unexpected = sorted(set(tensors) - set(state))
    if missing or unexpected:
        raise CheckpointError(
            f"{path} does not match the config: missing {sorted(missing)}, unexpected {unexpected}"
        )
    shapes = {n: p.shape for n, p in model.named_parameters(remove_duplicate=False)}
    wrong = [
        f"{n} {list(t.shape)}, wants {list(shapes[n])}"
        for n, t in state.items()
        if t.shape != shapes[n]
    ]
    if wrong:
        raise CheckpointError(f"{path} does not match the config: shapes {wrong}")
    return state


def _weights_model_name(path: Path) -> str | None:
    try:
        with safe_open(str(path), framework="pt") as weights:
            return (weights.metadata() or {}).get("model")
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"cannot read weights from {path}: {err}") from err


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, RuntimeError) as err:
        raise CheckpointError(f"cannot read weights from {path}: {err}") from err


def config_meta(config: ModelConfig) -> dict:
    """What ``config.json`` holds: the format, its version and the config (JSON data)."""
    return {"format": FORMAT, "version": FORMAT_VERSION, "config": config.to_dict()}


def read_config(path: Path) -> ModelConfig:
    """The ModelConfig in a ``config.json`` of any readable format version, upgraded to the
    current fields; CheckpointError if it is not one (the MLX loader reads configs here too)."""
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path} is not valid JSON: {err}") from err
    except (RecursionError, ValueError) as err:  # nesting too deep; an int of 5,000 digits
        raise CheckpointError(f"{path} is not a config.json this library reads: {err}") from err
    return config_from_meta(meta, path)


def config_from_meta(meta: Any, path: Path) -> ModelConfig:
    """``read_config`` for JSON data already read (``config_meta``'s form) from ``path``
    (named in errors): a training checkpoint's state file holds one too."""
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or "config" not in meta:
        raise CheckpointError(f"{path} is not a {FORMAT} config")
    version = meta.get("version")
    if version not in READABLE_VERSIONS:
        raise CheckpointError(
            f"{path} has format version {version!r}, this library reads {READABLE_VERSIONS}"
        )
    config = meta["config"]
    if not isinstance(config, dict) or not isinstance(config.get("memory"), dict):
        raise CheckpointError(f"{path}: 'config' and 'config.memory' must be JSON objects")
    if version == 1:
        config = _upgrade_v1(config, path)
    if version in (1, 2):
        config = _upgrade_v2(config, path)
    if version in (1, 2, 3):
        config = _upgrade_v3(config, path)
    if version in (1, 2, 3, 4):
        config = _upgrade_v4(config, path)
    if version in (1, 2, 3, 4, 5):
        config = _upgrade_v5(config, path)
    if version in (1, 2, 3, 4, 5, 6):
        config = _upgrade_v6(config, path)
    if version in (1, 2, 3, 4, 5, 6, 7):
        config = _upgrade_v7(config, path)
    if version in (1, 2, 3, 4, 5, 6, 7, 8):
        config = _upgrade_v8(config, path)
    name = config.get("name")
    if name not in MODELS:
        raise CheckpointError(f"{path} names unknown model {name!r}; known: {list(MODELS)}")
    _require_keys(config, ModelConfig, path, "config")
    _require_keys(config["memory"], MemoryConfig, path, "config.memory")
    config = {**config, "memory": {**INIT_ONLY_BEFORE, **config["memory"]}}
    try:
        return ModelConfig.from_dict(config)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path} holds an invalid config: {err}") from err


def match_saved_config(where: str | Path, saved: ModelConfig, model: nn.Module) -> None:
    """CheckpointError, naming the fields, unless ``saved`` (a checkpoint's model config) is
    ``model.config`` up to the fields that only chose how the weights were drawn
    (``INIT_ONLY_FIELDS`` and ``GATE_INIT_FIELDS``). A model built with today's defaults for
    those fields takes the saved values back, so what it saves next still says how its
    weights were drawn. (The trainer's ``--resume`` builds the checkpoint's own model, so
    it always matches.)"""
    ours, theirs = model.config.to_dict(), saved.to_dict()
    if ours == theirs:
        return
    if _architecture(ours) != _architecture(theirs):
        differ = [
            f"{key}={theirs_value!r} (this run: {ours_value!r})"
            for key, theirs_value, ours_value in model_config_differences(
                _architecture(theirs), _architecture(ours)
            )
        ]
        raise CheckpointError(f"{where} holds a different model: {', '.join(differ)}")
    model.config = saved


def model_config_differences(
    theirs: dict, ours: dict, prefix: str = ""
) -> Iterator[tuple[str, Any, Any]]:
    """(dotted key, saved value, this run's value) for every field where two config dicts
    differ, the memory's nested fields as ``memory.KEY``."""
    for key in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(key), ours.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            yield from model_config_differences(a, b, f"{prefix}{key}.")
        elif a != b:
            yield f"{prefix}{key}", a, b


def _architecture(config: dict) -> dict:
    """A config dict without what only chose the untrained weights: ``INIT_ONLY_FIELDS`` and
    the gates' starting values (``GATE_INIT_FIELDS``), which the saved gate biases carry."""
    memory = {
        k: v
        for k, v in config["memory"].items()
        if k not in INIT_ONLY_FIELDS and k not in GATE_INIT_FIELDS
    }
    return {**config, "memory": memory}


def _require_keys(data: dict, cls: type, path: Path, what: str) -> None:
    """A saved config names every field: a default filled in silently would build a model
    of another shape and fail later as a weight mismatch. Fields that only choose how
    weights are drawn (``INIT_ONLY_FIELDS``) may be absent: the saved weights are the model."""
    missing = sorted({f.name for f in fields(cls)} - set(data) - set(INIT_ONLY_FIELDS))
    if missing:
        raise CheckpointError(f"{path}: {what} is missing key(s) {missing}")


def _upgrade_v1(config: dict, path: Path) -> dict:
    """Format 1 -> 2: ``muon`` becomes ``update_rule``; ``impl`` and ``checkpoint`` were
    run-time choices and are dropped."""
    memory = {k: v for k, v in config["memory"].items() if k not in ("impl", "checkpoint")}
    if "muon" in memory:
        muon = memory.pop("muon")
        rule = _V1_UPDATE_RULES.get(muon) if isinstance(muon, bool | str) else None
        if rule is None:
            raise CheckpointError(f"{path}: config.memory.muon={muon!r} is not a known setting")
        memory["update_rule"] = rule
    return {**config, "memory": memory}


def _upgrade_v2(config: dict, path: Path) -> dict:
    """Format 2 -> 3: the memory's stability fields did not exist; the layer then had
    unbounded gates, no clip and decay toward zero, so those are the values it is read with."""
    present = sorted(set(UNBOUNDED_GATES) & set(config["memory"]))
    if present:
        raise CheckpointError(f"{path}: format 2 has no config.memory field(s) {present}")
    return {**config, "memory": {**config["memory"], **UNBOUNDED_GATES}}


def _upgrade_v4(config: dict, path: Path) -> dict:
    """Format 4 -> 5: the MAC options did not exist; every MAC was the papers' form."""
    present = sorted(set(MAC_FIELDS) & set(config))
    if present:
        raise CheckpointError(f"{path}: formats 1-4 have no config field(s) {present}")
    return {**MAC_FIELDS, **config}


def _upgrade_v5(config: dict, path: Path) -> dict:
    """Format 5 -> 6: the MAG option did not exist; every MAG was the papers' form."""
    present = sorted(set(MAG_FIELDS) & set(config))
    if present:
        raise CheckpointError(f"{path}: formats 1-5 have no config field(s) {present}")
    return {**MAG_FIELDS, **config}


def _upgrade_v6(config: dict, path: Path) -> dict:
    """Format 6 -> 7: ``timescale_ratio`` did not exist; every head had the same bounds."""
    present = sorted(set(FORMAT_7_FIELDS) & set(config["memory"]))
    if present:
        raise CheckpointError(f"{path}: formats 1-6 have no config.memory field(s) {present}")
    return {**config, "memory": {**config["memory"], **FORMAT_7_FIELDS}}


def _upgrade_v7(config: dict, path: Path) -> dict:
    """Format 7 -> 8: ``timescale_lr_ratio`` did not exist; theta shared alpha's timescales."""
    present = sorted(set(FORMAT_8_FIELDS) & set(config["memory"]))
    if present:
        raise CheckpointError(f"{path}: formats 1-7 have no config.memory field(s) {present}")
    return {**config, "memory": {**config["memory"], **FORMAT_8_FIELDS}}


def _upgrade_v8(config: dict, path: Path) -> dict:
    """Format 8 -> 9: ``mac_gate`` did not exist; every MAC gated y by its memory's read (a
    format-8 ``mag_gate`` never reached a MAC, so it is not read as one)."""
    present = sorted(set(MAC_GATE_FIELDS) & set(config))
    if present:
        raise CheckpointError(f"{path}: formats 1-8 have no config field(s) {present}")
    return {**MAC_GATE_FIELDS, **config}


def _upgrade_v3(config: dict, path: Path) -> dict:
    """Format 3 -> 4: ``omega_gate_source`` did not exist; every Omega gate was the step's."""
    present = sorted(set(LATER_FIELDS) & set(config["memory"]))
    if present:
        raise CheckpointError(f"{path}: formats 1-3 have no config.memory field(s) {present}")
    return {**config, "memory": {**config["memory"], **LATER_FIELDS}}
