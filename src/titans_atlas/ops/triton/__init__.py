"""Fused Triton kernels for the chunked dual form (docs/gpu.md). Importing this package
imports triton; ``import titans_atlas`` never does."""

from .scan import check_supported, memory_scan_triton

__all__ = ["check_supported", "memory_scan_triton"]
