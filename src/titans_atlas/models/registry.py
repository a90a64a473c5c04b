"""The model registry: architecture name -> (class, the config defaults that define it).

Architectures register themselves with ``@register(name, **defaults)`` when ``models`` is
imported; ``build_model(config)`` builds one from a ``ModelConfig``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from .config import SIZE_PRESETS, ModelConfig

MODELS: dict[str, tuple[type[nn.Module], dict[str, Any]]] = {}


def register(name: str, **defaults: Any) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Register an architecture under ``name`` with the config defaults that define it."""

    def add(cls: type[nn.Module]) -> type[nn.Module]:
        MODELS[name] = (cls, defaults)
        return cls

    return add


def list_models() -> list[str]:
    """Names accepted by ``create_model``."""
    return list(MODELS)


def model_config(name: str, preset: str | None = None, **overrides: Any) -> ModelConfig:
    """The config ``create_model`` would build: architecture defaults, then the size preset,
    then ``overrides``."""
    if not isinstance(name, str) or name not in MODELS:
        raise ValueError(f"unknown model {name!r}; available: {list_models()}")
    if preset is not None and (not isinstance(preset, str) or preset not in SIZE_PRESETS):
        raise ValueError(f"unknown preset {preset!r}; available: {list(SIZE_PRESETS)}")
    config = ModelConfig(name=name).with_overrides(**MODELS[name][1])
    if preset is not None:
        config = config.with_overrides(**SIZE_PRESETS[preset])
    return config.with_overrides(**overrides)


def create_model(name: str, preset: str | None = None, **overrides: Any) -> nn.Module:
    """Build a registered architecture, e.g. ``create_model("mac", dim=256, window=64)``."""
    return build_model(model_config(name, preset, **overrides))


def build_model(config: ModelConfig) -> nn.Module:
    """The registered architecture ``config.name`` built from ``config``."""
    if not isinstance(config, ModelConfig):  # a dict or None used to be an AttributeError
        raise ValueError(
            f"build_model takes a ModelConfig (e.g. model_config('mag', dim=64)), got "
            f"{type(config).__name__}"
        )
    if config.name not in MODELS:
        raise ValueError(f"unknown model {config.name!r}; available: {list_models()}")
    return MODELS[config.name][0](config)
