"""Per-token clipping of the inner gradient (docs/memory.md, section 9).

Axes: B batch, H heads, N tokens or key columns, d_in / d_out a weight's input / output width.

Every token's gradient of every weight is rank-1, g_u = a_u^T b_u, so its Frobenius norm is
|a_u| |b_u| and clipping it to ``max_norm`` scales one factor:

    s_u = min(1, max_norm / (|a_u| |b_u|)),     g~_u = a_u^T (s_u b_u).

s_u is computed as ``max_norm / sqrt(max(|a_u|^2 |b_u|^2, max_norm^2))``: the same value with
no division by zero and no square root of zero, so its gradient is exact wherever the clip
binds and exactly zero (never NaN) where it does not, zero factors included.
"""

from __future__ import annotations

import torch

Factors = dict[str, tuple[torch.Tensor, torch.Tensor]]


def clip_scale(a: torch.Tensor, b: torch.Tensor, max_norm: float) -> torch.Tensor:
    """s = min(1, max_norm / (|a| |b|)) per row: a ``[..., N, d_in]``, b ``[..., N, d_out]``
    -> ``[..., N, 1]``."""
    squared = (a * a).sum(-1, keepdim=True) * (b * b).sum(-1, keepdim=True)
    return max_norm * torch.rsqrt(squared.clamp_min(max_norm * max_norm))


def clip_factors(factors: Factors, max_norm: float | None) -> Factors:
    """The factors of every token's gradient clipped to Frobenius norm ``max_norm`` (weight
    by weight), as ``(a, s b)``; None leaves them as they are (the spec's recurrence)."""
    if max_norm is None:
        return factors
    return {name: (a, b * clip_scale(a, b, max_norm)) for name, (a, b) in factors.items()}
