"""Pure functions of the memory engine in MLX: arrays in, arrays out, no parameters
(mirrors ``titans_atlas.ops``; axis legend in ``titans_atlas/ops/README.md``)."""

from .feature_maps import default_polynomial_coefficients, polynomial_features, polynomial_width
from .memory_models import GatedMLPMemory, LinearMemory, MemoryModel, MLPMemory
from .newton_schulz import newton_schulz5, newton_schulz5_reference
from .scan import memory_scan
from .scan_chunk import memory_scan_chunk
from .scan_reference import memory_scan_reference
from .state import MemoryState

__all__ = [
    "GatedMLPMemory",
    "LinearMemory",
    "MLPMemory",
    "MemoryModel",
    "MemoryState",
    "default_polynomial_coefficients",
    "memory_scan",
    "memory_scan_chunk",
    "memory_scan_reference",
    "newton_schulz5",
    "newton_schulz5_reference",
    "polynomial_features",
    "polynomial_width",
]
