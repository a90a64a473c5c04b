"""Save and load models: ``config.json`` (the ModelConfig) beside ``model.safetensors``.

No pickle anywhere: weights go through safetensors, the config through JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model as load_safetensors
from safetensors.torch import save_model as save_safetensors

from .models.backbone import MODELS, LanguageModel, build_model
from .models.config import ModelConfig

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
FORMAT = "titans-atlas"
FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded (missing or corrupt file, unknown model)."""


def save_model(model: LanguageModel, directory: str | Path) -> None:
    """Write ``model``'s config and weights into ``directory`` (created if needed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, "version": FORMAT_VERSION, "config": model.config.to_dict()}
    (directory / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    # tied weights are stored once; the metadata guards against loading under another model
    save_safetensors(model, str(directory / WEIGHTS_FILE), metadata={"model": model.config.name})


def load_model(directory: str | Path, device: str | torch.device = "cpu") -> LanguageModel:
    """Rebuild a model saved by ``save_pretrained``; raises CheckpointError on bad input."""
    directory = Path(directory)
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    for path in (config_path, weights_path):
        if not path.is_file():
            raise CheckpointError(f"checkpoint is missing {path}")
    config = _read_config(config_path)
    saved_as = _weights_model_name(weights_path)
    if saved_as is not None and saved_as != config.name:
        raise CheckpointError(
            f"{weights_path} holds a {saved_as!r} model, config says {config.name!r}"
        )
    model = build_model(config)
    try:
        missing, unexpected = load_safetensors(model, str(weights_path), strict=False)
    except (SafetensorError, RuntimeError, OSError) as err:
        raise CheckpointError(f"cannot read weights from {weights_path}: {err}") from err
    if missing or unexpected:
        raise CheckpointError(
            f"{weights_path} does not match the config: missing {sorted(missing)}, "
            f"unexpected {sorted(unexpected)}"
        )
    return model.to(device)


def _weights_model_name(path: Path) -> str | None:
    try:
        with safe_open(str(path), framework="pt") as weights:
            return (weights.metadata() or {}).get("model")
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"cannot read weights from {path}: {err}") from err


def _read_config(path: Path) -> ModelConfig:
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path} is not valid JSON: {err}") from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or "config" not in meta:
        raise CheckpointError(f"{path} is not a {FORMAT} config")
    if meta.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format version {meta.get('version')}, this library reads {FORMAT_VERSION}"
        )
    name = meta["config"].get("name")
    if name not in MODELS:
        raise CheckpointError(f"{path} names unknown model {name!r}; known: {list(MODELS)}")
    try:
        return ModelConfig.from_dict(meta["config"])
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path} holds an invalid config: {err}") from err
