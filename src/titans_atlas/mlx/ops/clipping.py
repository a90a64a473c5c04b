"""Per-token clipping of the inner gradient in MLX (mirrors ``titans_atlas.ops.clipping``;
docs/memory.md, section 9): s_u = min(1, max_norm / (|a_u| |b_u|)) scales the factor b_u of
every token's rank-1 gradient a_u^T b_u, weight by weight.

Axes: B batch, H heads, N tokens or key columns, d_in / d_out a weight's widths.
"""

from __future__ import annotations

import mlx.core as mx

Factors = dict[str, tuple[mx.array, mx.array]]


def clip_scale(a: mx.array, b: mx.array, max_norm: float) -> mx.array:
    """s = min(1, max_norm / (|a| |b|)) per row, ``[..., N, 1]``: computed as
    max_norm / sqrt(max(|a|^2 |b|^2, max_norm^2)), finite with an exact gradient everywhere."""
    squared = (a * a).sum(axis=-1, keepdims=True) * (b * b).sum(axis=-1, keepdims=True)
    return max_norm * mx.rsqrt(mx.maximum(squared, max_norm * max_norm))


def clip_factors(factors: Factors, max_norm: float | None) -> Factors:
    """``(a, s b)`` for every weight; None leaves the factors as they are."""
    if max_norm is None:
        return factors
    return {name: (a, b * clip_scale(a, b, max_norm)) for name, (a, b) in factors.items()}
