"""Pure functions of the memory engine: tensors in, tensors out, no parameters.

Axis legend (see ops/README.md): B batch, T tokens, H heads, Dk key/query width, Dv value
width, Dh hidden width, C chunk size, N chunks, c Omega window. Functional layout
``[B, T, H, D]``; memory weights and momenta ``[B, H, d_in, d_out]``.
"""

from .checks import validating, value_checks_enabled
from .feature_maps import default_polynomial_coefficients, polynomial_features, polynomial_width
from .memory_models import ACTIVATIONS, GatedMLPMemory, LinearMemory, MemoryModel, MLPMemory
from .newton_schulz import newton_schulz5, newton_schulz5_reference
from .options import (
    MUON_VALUES,
    READ_MODES,
    SCAN_IMPLS,
    UPDATE_RULES,
    MemoryGates,
    ScanInputs,
    ScanOptions,
    update_rule_from_muon,
)
from .scan import memory_scan
from .scan_chunk import memory_scan_chunk
from .scan_reference import memory_scan_reference
from .state import MemoryState

__all__ = [
    "ACTIVATIONS",
    "MUON_VALUES",
    "READ_MODES",
    "SCAN_IMPLS",
    "UPDATE_RULES",
    "GatedMLPMemory",
    "LinearMemory",
    "MLPMemory",
    "MemoryGates",
    "MemoryModel",
    "MemoryState",
    "ScanInputs",
    "ScanOptions",
    "default_polynomial_coefficients",
    "memory_scan",
    "memory_scan_chunk",
    "memory_scan_reference",
    "newton_schulz5",
    "newton_schulz5_reference",
    "polynomial_features",
    "polynomial_width",
    "update_rule_from_muon",
    "validating",
    "value_checks_enabled",
]
