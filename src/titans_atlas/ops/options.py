"""What a memory scan takes besides q, k, v and the state: ``MemoryGates`` and ``ScanOptions``
with the allowed values of every option, and ``ScanInputs``, what its forms take
(``common/options.py``, shared with the MLX mirror); the torch implementations a scan may
dispatch to.

``layers/`` imports them from ``ops``.
"""

from __future__ import annotations

from ..common.options import (
    MUON_VALUES,
    READ_MODES,
    UPDATE_RULES,
    MemoryGates,
    ScanInputs,
    ScanOptions,
    update_rule_from_muon,
)

# "auto": the per-token loop for calls of at most max(1, C // 16) tokens, else the chunked form;
# "triton": the fused GPU kernels (extra [triton]; docs/gpu.md), only when asked for.
SCAN_IMPLS = ("auto", "chunk", "reference", "token", "triton")

__all__ = [
    "MUON_VALUES",
    "READ_MODES",
    "SCAN_IMPLS",
    "UPDATE_RULES",
    "MemoryGates",
    "ScanInputs",
    "ScanOptions",
    "update_rule_from_muon",
]
