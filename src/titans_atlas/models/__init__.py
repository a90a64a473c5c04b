"""Language models built on the memory: one file per architecture, one shared backbone."""

from . import atlas, controls, lmm, mac, mag, mal  # noqa: F401  (registers the architectures)
from .backbone import (
    MODELS,
    LanguageModel,
    ModelState,
    build_model,
    create_model,
    list_models,
    model_config,
    register,
)
from .config import SIZE_PRESETS, ModelConfig

__all__ = [
    "MODELS",
    "SIZE_PRESETS",
    "LanguageModel",
    "ModelConfig",
    "ModelState",
    "build_model",
    "create_model",
    "list_models",
    "model_config",
    "register",
]
