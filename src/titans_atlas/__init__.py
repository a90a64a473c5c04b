"""titans-atlas: neural long-term memory that learns at test time (Titans and ATLAS)."""

from .ops import GatedMLPMemory, LinearMemory, MemoryState, MLPMemory, memory_scan

__version__ = "0.1.0"

__all__ = ["GatedMLPMemory", "LinearMemory", "MLPMemory", "MemoryState", "memory_scan"]
