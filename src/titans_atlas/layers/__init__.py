"""Modules that own parameters and call the ops: attention, the memory layer, small blocks."""

from .attention import Attention, KVCache, VisibilityRule
from .basic import CausalConv, SwiGLU, apply_rotary, rotary, rotary_tables
from .hooks import MemoryRead, MemoryWrite, register_memory_hook
from .neural_memory import MemoryConfig, MemoryLayerState, NeuralMemory

__all__ = [
    "Attention",
    "CausalConv",
    "KVCache",
    "MemoryConfig",
    "MemoryLayerState",
    "MemoryRead",
    "MemoryWrite",
    "NeuralMemory",
    "SwiGLU",
    "VisibilityRule",
    "apply_rotary",
    "register_memory_hook",
    "rotary",
    "rotary_tables",
]
