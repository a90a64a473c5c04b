"""Modules that own parameters and call the ops: attention, the memory layer, small blocks."""

from .attention import Attention, KVCache, VisibilityRule
from .basic import CausalConv, SwiGLU, apply_rotary, rotary, rotary_tables
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
    "apply_rotary",
    "rotary",
    "rotary_tables",
]
