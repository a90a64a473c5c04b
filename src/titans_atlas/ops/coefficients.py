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

import torch

from ..common.coefficients import ChunkGates, MomentumCoefficients, MuonCoefficients

# Smallest gate value taken into log space. A gate of exactly 0 (eta = 0, or 1 - alpha = 0) is
# evaluated at TINY with a straight-through gradient: exp(log TINY + rest) is 0 to ~1e-30 in
# value, and d/d gate = (TINY * rest) / TINY = rest is the true derivative of the product.
TINY = 1e-30


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


def _apply_band(coef: torch.Tensor, band: torch.Tensor | None) -> torch.Tensor:
    """Fold the Omega window in: per-token gradient weights [.., s] -> per key column [.., u]."""
    return coef if band is None else coef @ band


def momentum_coefficients(gates: ChunkGates, read: str) -> MomentumCoefficients:
    """Titans momentum: S_t = eta_t S_{t-1} - theta_t G_t, W_t = (1 - alpha_t) W_{t-1} + S_t."""
    keep, carry, keep_from_start, carry_from_start = _gate_products(gates)
    momentum_into_weights = (keep @ carry_from_start.unsqueeze(-1)).squeeze(-1)  # mu [.., C]
    # K = A E diag(theta) Gamma [.., C, U]; kappa = E[C-1] diag(theta) Gamma [.., U]
    grad_into_weights = _apply_band((keep @ carry) * gates.lr.unsqueeze(-2), gates.band)
    grad_into_momentum = _apply_band(carry[..., -1:, :] * gates.lr.unsqueeze(-2), gates.band)
    read_keep, read_momentum, read_grad = keep_from_start, momentum_into_weights, grad_into_weights
    anchor = read_anchor = _anchor_from_start(gates)
    if read == "before":
        read_keep = _shift_rows(read_keep, 1.0, dim=-1)
        read_momentum = _shift_rows(read_momentum, 0.0, dim=-1)
        read_grad = _shift_rows(read_grad, 0.0, dim=-2)
        read_anchor = _shift_rows(read_anchor, 0.0, dim=-1)
    return MomentumCoefficients(
        read_keep=read_keep,
        read_momentum=read_momentum,
        read_grad=read_grad,
        end_keep=keep_from_start[..., -1],
        end_momentum=momentum_into_weights[..., -1],
        end_grad=grad_into_weights[..., -1, :],
        momentum_carry=carry_from_start[..., -1],
        momentum_grad=grad_into_momentum.squeeze(-2),
        read_anchor=read_anchor,
        end_anchor=anchor[..., -1],
    )


def muon_coefficients(gates: ChunkGates, read: str, per_chunk: bool) -> MuonCoefficients:
    """Muon: S_t = eta_t S_{t-1} + G_t, W_t = (1 - alpha_t) W_{t-1} - theta_t NS5(S_t); with
    ``per_chunk`` (rule "muon_chunk") the NS5 step is taken only at the token that closes a
    chunk (row C - 1): M = 1 and P[i, 0] = [i = C - 1] theta_{C-1}."""
    keep, carry, keep_from_start, carry_from_start = _gate_products(gates)
    # Muon's momentum takes every gradient unscaled (no theta): a padding token's must be
    # masked here, since a memory with f(W, 0) != 0 has a non-zero gradient at its zero key.
    carry = carry * gates.valid[..., None, :].to(carry.dtype)  # E[m, s], padding columns s zeroed
    if per_chunk:
        rows_carry = carry_from_start[..., -1:]
        rows_grad = _apply_band(carry[..., -1:, :], gates.band)
        closes = gates.lr[..., -1] * gates.valid[..., -1]  # [B, H, N]
        update = torch.zeros_like(gates.lr).unsqueeze(-1)  # [B, H, N, C, 1]
        update = torch.cat([update[..., :-1, :], closes[..., None, None]], dim=-2)
    else:
        rows_carry = carry_from_start
        rows_grad = _apply_band(carry, gates.band)
        update = keep * gates.lr.unsqueeze(-2)  # P = A diag(theta) [.., C, C]
    read_keep, read_update = keep_from_start, update
    anchor = read_anchor = _anchor_from_start(gates)
    if read == "before":
        read_keep = _shift_rows(read_keep, 1.0, dim=-1)
        read_update = _shift_rows(read_update, 0.0, dim=-2)
        read_anchor = _shift_rows(read_anchor, 0.0, dim=-1)
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
