"""The MLX model registry (mirrors ``titans_atlas.models.registry``): architecture name ->
block-model class, under the torch registry's names; configs come from the torch side."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.nn as nn

from ...models.config import ModelConfig
from ...models.registry import model_config

MODELS: dict[str, type[nn.Module]] = {}


def register(name: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Register an MLX architecture under the torch registry's ``name``."""

    def add(cls: type[nn.Module]) -> type[nn.Module]:
        MODELS[name] = cls
        return cls

    return add


def list_models() -> list[str]:
    """Names accepted by ``create_model``."""
    return list(MODELS)


def build_model(config: ModelConfig) -> nn.Module:
    if config.name not in MODELS:
        raise ValueError(f"unknown MLX model {config.name!r}; available: {list_models()}")
    return MODELS[config.name](config)


def create_model(name: str, preset: str | None = None, **overrides: Any) -> nn.Module:
    """Build a registered architecture from the torch side's defaults and presets, e.g.
    ``create_model("mac", dim=256, window=64)``."""
    return build_model(model_config(name, preset, **overrides))
