"""Gate-only work of the chunked scan: per-chunk coefficient matrices (docs/memory.md, section 3).

Axes: B batch, H heads, N chunks, C chunk size, c Omega window, U = C + c - 1 key columns
(the chunk's tokens plus the c - 1 halo tokens before it), M rows whose Muon momentum is
materialised (C for per-token Muon, 1 for per-chunk Muon).

Inside chunk n every weight is a combination of the chunk's start weights W0, start momentum
S0 and the per-token gradients g_u = a_u^T b_u taken at the base weights (symbols as in the
table at the top of docs/memory.md):

    W_i = beta_i W0 + mu_i S0 - sum_u K[i, u] g_u          (rule "momentum", eq. 2-3)
    S_end = e_{C-1} S0 - sum_u kappa_u g_u
    S_m = e_m S0 + sum_u (E Gamma)[m, u] g_u                (rules "muon", "muon_chunk")
    W_i = beta_i W0 - sum_m P[i, m] NS5(S_m)

With a decay target A (``decay_to``, section 10) every W_i gains (1 - beta_i) A: the
``read_anchor`` / ``end_anchor`` coefficients, computed as -expm1(log beta_i) so that the
small 1 - beta of weak decay keeps its relative precision.

Products of gates are built in log space from segment sums, and everything that must vanish
is masked to -inf *before* exp (masking after exp meets 0 * inf = NaN on underflow).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..common import coefficients
from ..common.coefficients import (
    ChunkGates,
    GateAlgebra,
    MomentumCoefficients,
    MuonCoefficients,
)
from .state import TensorDict

# Smallest gate value taken into log space. A gate of exactly 0 (eta = 0, or 1 - alpha = 0) is
# evaluated at TINY with a straight-through gradient: exp(log TINY + rest) is 0 to ~1e-30 in
# value, and d/d gate = (TINY * rest) / TINY = rest is the true derivative of the product.
TINY = 1e-30


class Chunk(NamedTuple):
    """Chunk n as a chunk step takes it: its coefficients (``MomentumCoefficients`` or
    ``MuonCoefficients`` of this chunk), the ``base`` weights its gradients are taken at, its
    start weights W0 and momentum S0, q ``[B, H, C, Dk]``, k/v ``[B, H, U, D]``, and the
    decay target A (None: the decay pulls toward zero)."""

    coef: MomentumCoefficients | MuonCoefficients
    base: TensorDict
    weights: TensorDict
    momentum: TensorDict
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    anchor: TensorDict | None


def safe_log(x: torch.Tensor) -> torch.Tensor:
    """log(x) for x in [0, 1]: log(max(x, TINY)) in value, with the gradient of log at that
    point flowing to x even where x < TINY (so products of gates keep exact derivatives)."""
    floored = x + (x.clamp_min(TINY) - x).detach()
    return torch.log(floored)


def safe_log1m(x: torch.Tensor) -> torch.Tensor:
    """log(1 - x) for x in [0, 1] (1 - x rounds exactly as the reference's (1 - alpha) does)."""
    return safe_log(1.0 - x)


def segment_sum(x: torch.Tensor) -> torch.Tensor:
    """``[..., C]`` -> ``[..., C, C]`` with entry [i, j] = sum_{r=j+1}^{i} x_r for j <= i and
    -inf above the diagonal. Each entry sums only its own terms (no difference of cumsums), so
    long strongly-decaying runs keep full precision."""
    size = x.shape[-1]
    strict = torch.ones(size, size, dtype=torch.bool, device=x.device).tril(-1)
    terms = x.unsqueeze(-1).expand(*x.shape, size).masked_fill(~strict, 0.0)  # [..., r, j]
    sums = terms.cumsum(dim=-2)  # [..., i, j]
    lower = torch.ones(size, size, dtype=torch.bool, device=x.device).tril()
    return sums.masked_fill(~lower, float("-inf"))


def omega_band(gate: torch.Tensor) -> torch.Tensor:
    """Omega gates ``[B, H, N, C, c]`` -> banded ``[B, H, N, C, U]`` with [s, s + c-1 - j] =
    gate[s, j]: row s collects tap j of token s, which is key column s - j of the window."""
    size, window = gate.shape[-2], gate.shape[-1]
    rows = torch.arange(size, device=gate.device)
    cols = torch.arange(size + window - 1, device=gate.device)
    taps = torch.arange(window, device=gate.device)
    placement = cols[None, None, :] == rows[None, :, None] + (window - 1) - taps[:, None, None]
    return torch.einsum("...sj,jsu->...su", gate, placement.to(gate.dtype))


def _shift_rows(x: torch.Tensor, first: float, dim: int) -> torch.Tensor:
    """Row i takes row i - 1's value (read "before"); row 0 gets ``first``."""
    head = torch.full_like(x.narrow(dim, 0, 1), first)
    return torch.cat([head, x.narrow(dim, 0, x.shape[dim] - 1)], dim=dim)


def _gate_products(gates: ChunkGates) -> tuple[torch.Tensor, ...]:
    """keep A[i, m] = prod_{r=m+1}^{i} (1 - alpha_r), zero on padding columns m;
    carry E[m, s] = prod_{r=s+1}^{m} eta_r; keep_from_start beta_i and carry_from_start e_i."""
    keep_log = segment_sum(gates.log_keep).masked_fill(~gates.valid[..., None, :], float("-inf"))
    keep = torch.exp(keep_log)  # A [.., C, C]
    carry = torch.exp(segment_sum(gates.log_momentum))  # E [.., C, C]
    keep_from_start = torch.exp(gates.log_keep.cumsum(-1))  # beta [.., C]
    carry_from_start = torch.exp(gates.log_momentum.cumsum(-1))  # e [.., C]
    return keep, carry, keep_from_start, carry_from_start


def _anchor_from_start(gates: ChunkGates) -> torch.Tensor:
    """1 - beta_i [.., C]: the weight of the decay target A in W_i (section 10)."""
    return -torch.expm1(gates.log_keep.cumsum(-1))


def _mask_columns(carry: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return carry * valid[..., None, :].to(carry.dtype)


def _last_row(closes: torch.Tensor, lr: torch.Tensor) -> torch.Tensor:
    """``[B, H, N, C, 1]``: zeros, ``closes [B, H, N]`` in row C - 1."""
    update = torch.zeros_like(lr).unsqueeze(-1)
    return torch.cat([update[..., :-1, :], closes[..., None, None]], dim=-2)


ALGEBRA = GateAlgebra(
    _gate_products, _anchor_from_start, lambda x, first, axis: _shift_rows(x, first, dim=axis),
    _mask_columns, _last_row,
)  # fmt: skip


def momentum_coefficients(gates: ChunkGates, read: str) -> MomentumCoefficients:
    """Titans momentum: S_t = eta_t S_{t-1} - theta_t G_t, W_t = (1 - alpha_t) W_{t-1} + S_t
    (the formulas: ``common/coefficients.py``)."""
    return coefficients.momentum_coefficients(ALGEBRA, gates, read)


def muon_coefficients(gates: ChunkGates, read: str, per_chunk: bool) -> MuonCoefficients:
    """Muon, per token or (``per_chunk``, rule "muon_chunk") per chunk (the formulas:
    ``common/coefficients.py``)."""
    return coefficients.muon_coefficients(ALGEBRA, gates, read, per_chunk)
