"""Input checks of ``memory_scan`` that read only shapes, for both backends (``ops/checks.py``,
``mlx/ops/scan.py``): a ValueError naming the argument.

Axes: B batch, T tokens, H heads, Dk key width, Dv value width.
"""

from __future__ import annotations

from typing import Any


def check_qkv_shapes(memory: Any, q: Any, k: Any, v: Any) -> None:
    """q, k ``[B, T, H, Dk]`` alike, v ``[B, T, H, Dv]``, with the memory's widths Dk, Dv."""
    batch, length, heads, _ = q.shape
    if k.shape != q.shape:
        raise ValueError(f"k must have q's shape {list(q.shape)}, got {list(k.shape)}")
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(f"v must be [{batch}, {length}, {heads}, Dv], got {list(v.shape)}")
    if q.shape[-1] != memory.dim_in:
        raise ValueError(f"q/k width {q.shape[-1]} != memory.dim_in {memory.dim_in}")
    if v.shape[-1] != memory.dim_out:
        raise ValueError(f"v width {v.shape[-1]} != memory.dim_out {memory.dim_out}")
