"""MLX modules that own parameters and call the MLX ops (mirrors ``titans_atlas.layers``)."""

from .attention import Attention, KVCache
from .basic import CausalConv, SwiGLU, rotary
from .neural_memory import MemoryLayerState, NeuralMemory, scan_options, update_rule

__all__ = [
    "Attention",
    "CausalConv",
    "KVCache",
    "MemoryLayerState",
    "NeuralMemory",
    "SwiGLU",
    "rotary",
    "scan_options",
    "update_rule",
]
