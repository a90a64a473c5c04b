"""MLX language models: one file per architecture on a shared backbone (mirrors
``titans_atlas.models``; configs are the torch side's ``ModelConfig``)."""

from . import atlas, controls, lmm, mac, mag, mal  # noqa: F401  (registers the architectures)
from .backbone import MODELS, LanguageModel, ModelState, build_model, create_model, list_models

__all__ = ["MODELS", "LanguageModel", "ModelState", "build_model", "create_model", "list_models"]
