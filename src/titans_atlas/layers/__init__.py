"""Modules that own parameters and call the ops: attention, the memory layer, small blocks."""

from .attention import Attention, KVCache, VisibilityRule
from .basic import CausalConv, SwiGLU, rotary
from .neural_memory import MemoryConfig, MemoryLayerState, NeuralMemory

__all__ = [
    "Attention",
    "CausalConv",
    "KVCache",
    "MemoryConfig",
    "MemoryLayerState",
    "NeuralMemory",
    "SwiGLU",
    "VisibilityRule",
    "rotary",
]
