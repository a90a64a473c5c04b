"""Language models built on the memory: one file per architecture, one shared backbone."""

# Registration order is the order of list_models(): Titans, ATLAS, then the controls.
from . import mac, mag, mal, lmm, atlas, deltanet, controls  # noqa: F401, I001  (registers the architectures)
from .backbone import (
    MODELS,
    LanguageModel,
    build_model,
    create_model,
    list_models,
    model_config,
    register,
)
from .blocks import HybridState
from .config import SIZE_PRESETS, ModelConfig
from .mac import MACState
from .state import ModelState, state_fingerprint

__all__ = [
    "MODELS",
    "SIZE_PRESETS",
    "HybridState",
    "LanguageModel",
    "MACState",
    "ModelConfig",
    "ModelState",
    "build_model",
    "create_model",
    "list_models",
    "model_config",
    "register",
    "state_fingerprint",
]
