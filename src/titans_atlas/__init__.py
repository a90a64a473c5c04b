"""titans-atlas: neural long-term memory that learns at test time (Titans and ATLAS).

import titans_atlas as ta
model = ta.create_model("mac", vocab_size=256, dim=256, depth=4, window=128)
logits, state = model(input_ids)            # [B, T] -> [B, T, V]; state carries everything
"""

from .io import CheckpointError, load_model
from .layers import MemoryConfig, NeuralMemory
from .models import (
    SIZE_PRESETS,
    LanguageModel,
    ModelConfig,
    ModelState,
    create_model,
    list_models,
    model_config,
)
from .ops import GatedMLPMemory, LinearMemory, MemoryState, MLPMemory, memory_scan

__version__ = "0.1.0"

__all__ = [
    "SIZE_PRESETS",
    "CheckpointError",
    "GatedMLPMemory",
    "LanguageModel",
    "LinearMemory",
    "MLPMemory",
    "MemoryConfig",
    "MemoryState",
    "ModelConfig",
    "ModelState",
    "NeuralMemory",
    "create_model",
    "list_models",
    "load_model",
    "memory_scan",
    "model_config",
]
