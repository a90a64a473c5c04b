"""The bundles the chunked scan passes around, named once for both backends: the gates on
the chunk grid and the coefficients of each update rule (docs/memory.md, section 3; the
symbols are the table in ops/README.md). ``ops/coefficients.py`` fills them with torch
tensors, ``mlx/ops/coefficients.py`` with MLX arrays -- same fields, same names.

Axes: B batch, H heads, N chunks, C chunk size, U = C + c - 1 key columns, M rows whose Muon
momentum is materialised (C per-token, 1 per-chunk).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Array = Any  # a torch.Tensor or an mlx.core.array


@dataclass
class ChunkGates:
    """Gates laid out on the chunk grid; padding rows are identity steps."""

    lr: Array  # theta_s [B, H, N, C], 0 on padding
    log_momentum: Array  # log eta_s [B, H, N, C], 0 on padding
    log_keep: Array  # log(1 - alpha_s) [B, H, N, C], 0 on padding
    valid: Array  # bool [N, C], False on padding
    band: Array | None  # Gamma [B, H, N, C, U]; None = identity (c = 1)


@dataclass
class MomentumCoefficients:
    """Rule "momentum": W_i = beta_i W0 + mu_i S0 - sum_u K[i, u] g_u, row i read by token i
    (shifted one row down for read "before"); the chunk's end is row C - 1."""

    read_keep: Array  # beta_i [B, H, N, C]
    read_momentum: Array  # mu_i [B, H, N, C]
    read_grad: Array  # K[i, u] [B, H, N, C, U]
    end_keep: Array  # beta_{C-1} [B, H, N]
    end_momentum: Array  # mu_{C-1} [B, H, N]
    end_grad: Array  # K[C-1, u] [B, H, N, U]
    momentum_carry: Array  # e_{C-1} [B, H, N]: S_end = e_{C-1} S0 - sum_u kappa_u g_u
    momentum_grad: Array  # kappa_u [B, H, N, U]
    read_anchor: Array  # 1 - beta_i [B, H, N, C]: weight of the decay target A
    end_anchor: Array  # 1 - beta_{C-1} [B, H, N]


@dataclass
class MuonCoefficients:
    """Rules "muon" / "muon_chunk": S_m = e_m S0 + sum_u (E Gamma)[m, u] g_u for the M rows m
    whose momentum is materialised, W_i = beta_i W0 - sum_m P[i, m] NS5(S_m)."""

    rows_carry: Array  # e_m [B, H, N, M]
    rows_grad: Array  # (E Gamma)[m, u] [B, H, N, M, U]
    read_keep: Array  # beta_i [B, H, N, C]
    read_update: Array  # P[i, m] [B, H, N, C, M]
    end_keep: Array  # beta_{C-1} [B, H, N]
    end_update: Array  # P[C-1, m] [B, H, N, M]
    read_anchor: Array  # 1 - beta_i [B, H, N, C]: weight of the decay target A
    end_anchor: Array  # 1 - beta_{C-1} [B, H, N]


@dataclass(frozen=True)
class GateAlgebra:
    """A backend's gate-only primitives; the coefficient formulas below are written once
    against them (everything else they use is ``@``, ``*`` and indexing, alike in both)."""

    gate_products: Callable[[ChunkGates], tuple[Array, Array, Array, Array]]  # A, E, beta, e
    anchor_from_start: Callable[[ChunkGates], Array]  # 1 - beta_i [.., C]
    shift_rows: Callable[[Array, float, int], Array]  # (x, first, axis): read "before"
    mask_columns: Callable[[Array, Array], Array]  # (E [.., C, C], valid [N, C]): zero padding s
    last_row: Callable[[Array, Array], Array]  # (closes [B, H, N], lr [B, H, N, C]) -> [.., C, 1]


def apply_band(coef: Array, band: Array | None) -> Array:
    """Fold the Omega window in: per-token gradient weights [.., s] -> per key column [.., u]."""
    return coef if band is None else coef @ band


def _reads(
    ops: GateAlgebra, read: str, keep: Array, vectors: list[Array], matrices: list[Array]
) -> tuple[Array, list[Array], list[Array]]:
    """The read coefficients for ``read``: "after" (y_i = f(W_i, q_i)) as they are; "before"
    (y_i = f(W_{i-1}, q_i)) one token down, so row 0 reads the chunk's start as it is: keep 1,
    0 for the per-token ``vectors`` ``[.., C]`` and the rows of the ``matrices`` ``[.., C, *]``."""
    if read != "before":
        return keep, vectors, matrices
    vectors = [ops.shift_rows(x, 0.0, -1) for x in vectors]
    return ops.shift_rows(keep, 1.0, -1), vectors, [ops.shift_rows(x, 0.0, -2) for x in matrices]


def momentum_coefficients(ops: GateAlgebra, gates: ChunkGates, read: str) -> MomentumCoefficients:
    """Titans momentum: S_t = eta_t S_{t-1} - theta_t G_t, W_t = (1 - alpha_t) W_{t-1} + S_t."""
    keep, carry, keep_from_start, carry_from_start = ops.gate_products(gates)
    momentum_into_weights = (keep @ carry_from_start[..., None])[..., 0]  # mu [.., C]
    # K = A E diag(theta) Gamma [.., C, U]; kappa = E[C-1] diag(theta) Gamma [.., U]
    grad_into_weights = apply_band((keep @ carry) * gates.lr[..., None, :], gates.band)
    grad_into_momentum = apply_band(carry[..., -1:, :] * gates.lr[..., None, :], gates.band)
    anchor = ops.anchor_from_start(gates)
    read_keep, (read_momentum, read_anchor), (read_grad,) = _reads(
        ops, read, keep_from_start, [momentum_into_weights, anchor], [grad_into_weights]
    )
    return MomentumCoefficients(
        read_keep=read_keep,
        read_momentum=read_momentum,
        read_grad=read_grad,
        end_keep=keep_from_start[..., -1],
        end_momentum=momentum_into_weights[..., -1],
        end_grad=grad_into_weights[..., -1, :],
        momentum_carry=carry_from_start[..., -1],
        momentum_grad=grad_into_momentum[..., 0, :],
        read_anchor=read_anchor,
        end_anchor=anchor[..., -1],
    )


def muon_coefficients(
    ops: GateAlgebra, gates: ChunkGates, read: str, per_chunk: bool
) -> MuonCoefficients:
    """Muon: S_t = eta_t S_{t-1} + G_t, W_t = (1 - alpha_t) W_{t-1} - theta_t NS5(S_t); with
    ``per_chunk`` (rule "muon_chunk") the NS5 step is taken only at the token that closes a
    chunk (row C - 1): M = 1 and P[i, 0] = [i = C - 1] theta_{C-1}."""
    keep, carry, keep_from_start, carry_from_start = ops.gate_products(gates)
    # Muon's momentum takes every gradient unscaled (no theta): a padding token's must be
    # masked here, since a memory with f(W, 0) != 0 has a non-zero gradient at its zero key.
    carry = ops.mask_columns(carry, gates.valid)  # E[m, s], padding columns s zeroed
    if per_chunk:
        rows_carry = carry_from_start[..., -1:]
        rows_grad = apply_band(carry[..., -1:, :], gates.band)
        update = ops.last_row(gates.lr[..., -1] * gates.valid[..., -1], gates.lr)  # [.., C, 1]
    else:
        rows_carry = carry_from_start
        rows_grad = apply_band(carry, gates.band)
        update = keep * gates.lr[..., None, :]  # P = A diag(theta) [.., C, C]
    anchor = ops.anchor_from_start(gates)
    read_keep, (read_anchor,), (read_update,) = _reads(
        ops, read, keep_from_start, [anchor], [update]
    )
    return MuonCoefficients(
        rows_carry=rows_carry,
        rows_grad=rows_grad,
        read_keep=read_keep,
        read_update=read_update,
        end_keep=keep_from_start[..., -1],
        end_update=update[..., -1, :],
        read_anchor=read_anchor,
        end_anchor=anchor[..., -1],
    )
