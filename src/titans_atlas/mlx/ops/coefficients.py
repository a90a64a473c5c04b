"""Gate-only work of the chunked scan in MLX (mirrors ``titans_atlas.ops.coefficients``;
docs/memory.md, section 3).

Axes: B batch, H heads, N chunks, C chunk size, c Omega window, U = C + c - 1 key columns,
M rows whose Muon momentum is materialised (C per-token, 1 per-chunk). The bundles
(``ChunkGates``, ``MomentumCoefficients``, ``MuonCoefficients``) are ``common/coefficients.py``'s.

    W_i = read_keep_i W0 + read_momentum_i S0 - sum_u read_grad_iu a_u^T b_u   (momentum)
    W_i = read_keep_i W0 - sum_m read_update_im NS5(S_m)                          (Muon)

Products of gates are built in log space from segment sums; everything that must vanish is
masked to -inf *before* exp.
"""

from __future__ import annotations

import mlx.core as mx

from ...common import coefficients
from ...common.coefficients import (
    ChunkGates,
    GateAlgebra,
    MomentumCoefficients,
    MuonCoefficients,
)

# Smallest gate value taken into log space; a gate of exactly 0 gets a straight-through
# gradient (see the torch module).
TINY = 1e-30
NEG_INF = float("-inf")


def safe_log(x: mx.array) -> mx.array:
    """log(x) for x in [0, 1]: log(max(x, TINY)) in value, with the gradient of log at that
    point flowing to x even where x < TINY."""
    return mx.log(x + mx.stop_gradient(mx.maximum(x, TINY) - x))


def safe_log1m(x: mx.array) -> mx.array:
    """log(1 - x) for x in [0, 1]."""
    return safe_log(1.0 - x)


def segment_sum(x: mx.array) -> mx.array:
    """``[..., C]`` -> ``[..., C, C]`` with [i, j] = sum_{r=j+1}^{i} x_r for j <= i and -inf
    above the diagonal; each entry sums only its own terms (no difference of cumsums)."""
    size = x.shape[-1]
    strict = mx.tril(mx.ones((size, size), dtype=mx.bool_), k=-1)  # [r, j]: j < r
    terms = mx.where(strict, x[..., :, None], 0.0)  # [..., r, j]
    sums = mx.cumsum(terms, axis=-2)  # [..., i, j]
    lower = mx.tril(mx.ones((size, size), dtype=mx.bool_))
    return mx.where(lower, sums, NEG_INF)


def omega_band(gate: mx.array) -> mx.array:
    """Omega gates ``[B, H, N, C, c]`` -> banded ``[B, H, N, C, U]`` with [s, s + c-1 - j] =
    gate[s, j]: row s collects tap j of token s, which is key column s - j of the window."""
    size, window = gate.shape[-2], gate.shape[-1]
    rows = mx.arange(size)
    cols = mx.arange(size + window - 1)
    taps = mx.arange(window)
    placement = cols[None, None, :] == rows[None, :, None] + (window - 1) - taps[:, None, None]
    return mx.einsum("...sj,jsu->...su", gate, placement.astype(gate.dtype))


def _shift_rows(x: mx.array, first: float, axis: int) -> mx.array:
    """Row i takes row i - 1's value (read "before"); row 0 gets ``first``."""
    axis = axis % x.ndim
    head_shape = list(x.shape)
    head_shape[axis] = 1
    head = mx.full(head_shape, first, dtype=x.dtype)
    body = mx.split(x, [x.shape[axis] - 1], axis=axis)[0]
    return mx.concatenate([head, body], axis=axis)


def _gate_products(gates: ChunkGates) -> tuple[mx.array, ...]:
    """keep: A [i, m] = prod_{r=m+1}^{i} (1 - alpha_r), zero on padding columns m;
    carry: E [m, s] = prod_{r=s+1}^{m} eta_r; and their from-the-chunk-start forms."""
    keep_log = mx.where(gates.valid[..., None, :], segment_sum(gates.log_keep), NEG_INF)
    keep = mx.exp(keep_log)
    carry = mx.exp(segment_sum(gates.log_momentum))
    keep_from_start = mx.exp(mx.cumsum(gates.log_keep, axis=-1))
    carry_from_start = mx.exp(mx.cumsum(gates.log_momentum, axis=-1))
    return keep, carry, keep_from_start, carry_from_start


def _anchor_from_start(gates: ChunkGates) -> mx.array:
    """1 - beta_i [.., C]: the weight of a decay target A in W_i (docs/memory.md, section 10),
    as -expm1(log beta_i) so a weak decay keeps its relative precision."""
    return -mx.expm1(mx.cumsum(gates.log_keep, axis=-1))


def _mask_columns(carry: mx.array, valid: mx.array) -> mx.array:
    return carry * valid[..., None, :].astype(carry.dtype)


def _last_row(closes: mx.array, lr: mx.array) -> mx.array:
    """``[B, H, N, C, 1]``: zeros, ``closes [B, H, N]`` in row C - 1."""
    update = mx.zeros((*lr.shape[:-1], lr.shape[-1] - 1, 1), dtype=closes.dtype)
    return mx.concatenate([update, closes[..., None, None]], axis=-2)


ALGEBRA = GateAlgebra(_gate_products, _anchor_from_start, _shift_rows, _mask_columns, _last_row)


def momentum_coefficients(gates: ChunkGates, read: str) -> MomentumCoefficients:
    """As the torch ``momentum_coefficients``, on MLX arrays."""
    return coefficients.momentum_coefficients(ALGEBRA, gates, read)


def muon_coefficients(gates: ChunkGates, read: str, per_chunk: bool) -> MuonCoefficients:
    """As the torch ``muon_coefficients``, on MLX arrays."""
    return coefficients.muon_coefficients(ALGEBRA, gates, read, per_chunk)
