"""Save and load MLX models in the torch side's format: ``config.json`` (the ModelConfig)
beside ``model.safetensors`` with the same parameter names (mirrors
``titans_atlas.models.pretrained``). A directory written by either side loads on the other."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from ...models.config import ModelConfig
from ...models.pretrained import CONFIG_FILE, FORMAT, FORMAT_VERSION, WEIGHTS_FILE, CheckpointError
from ...models.pretrained import read_config as read_torch_config
from .registry import MODELS, build_model


def save_model(model: nn.Module, directory: str | Path) -> None:
    """Write ``model``'s config and weights into ``directory`` (created if needed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, "version": FORMAT_VERSION, "config": model.config.to_dict()}
    (directory / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(
        str(directory / WEIGHTS_FILE), weights, metadata={"model": model.config.name}
    )


def load_model(directory: str | Path, dtype: mx.Dtype = mx.float32) -> nn.Module:
    """Rebuild a model saved by either side's ``save_pretrained``; weights cast to ``dtype``.
    Raises CheckpointError on bad input."""
    directory = Path(directory)
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    for path in (config_path, weights_path):
        if not path.is_file():
            raise CheckpointError(f"checkpoint is missing {path}")
    config = read_config(config_path)
    try:
        weights, metadata = mx.load(str(weights_path), return_metadata=True)
    except (RuntimeError, ValueError, OSError) as err:
        raise CheckpointError(f"cannot read weights from {weights_path}: {err}") from err
    saved_as = (metadata or {}).get("model")
    if saved_as is not None and saved_as != config.name:
        raise CheckpointError(
            f"{weights_path} holds a {saved_as!r} model, config says {config.name!r}"
        )
    model = build_model(config)
    expected = dict(tree_flatten(model.parameters()))
    missing, unexpected = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{weights_path} does not match the config: missing {missing}, unexpected {unexpected}"
        )
    for name, value in weights.items():
        if value.shape != expected[name].shape:
            raise CheckpointError(
                f"{weights_path}: {name} has shape {list(value.shape)}, "
                f"the config needs {list(expected[name].shape)}"
            )
    model.update(tree_unflatten([(n, w.astype(dtype)) for n, w in weights.items()]))
    mx.eval(model.parameters())
    return model


def read_config(path: Path) -> ModelConfig:
    """The ModelConfig in a ``config.json`` (any format version the torch side reads, upgraded
    there); CheckpointError if it is not one or names a model MLX does not have."""
    config = read_torch_config(path)
    if config.name not in MODELS:
        raise CheckpointError(f"{path} names unknown model {config.name!r}; MLX has {list(MODELS)}")
    return config
