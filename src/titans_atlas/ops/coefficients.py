"""Gate-only work of the chunked scan: per-chunk coefficient matrices (docs/memory.md, section 3).

Axes: B batch, H heads, N chunks, C chunk size, c Omega window, U = C + c - 1 key columns
(the chunk's tokens plus the c - 1 halo tokens before it), M rows whose Muon momentum is
materialised (C for per-token Muon, 1 for per-chunk Muon).

Inside chunk n every weight is a combination of the chunk's start weights W0, start momentum
S0 and the per-token gradients a_u^T b_u taken at the base weights:

    W_i = read_decay_i W0 + read_momentum_i S0 - sum_u read_grad_iu a_u^T b_u      (plain)
    W_i = read_decay_i W0 - sum_m read_update_im NS5(S_m)                            (Muon)

Products of gates are built in log space from segment sums, and everything that must vanish
is masked to -inf *before* exp (masking after exp meets 0 * inf = NaN on underflow).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

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


@dataclass
class Gates:
    """Gates laid out on the chunk grid; padding rows are identity steps."""

    lr: torch.Tensor  # theta [B, H, N, C], 0 on padding
    log_momentum: torch.Tensor  # log eta [B, H, N, C], 0 on padding
    log_keep: torch.Tensor  # log(1 - alpha) [B, H, N, C], 0 on padding
    valid: torch.Tensor  # bool [N, C], False on padding
    band: torch.Tensor | None  # Omega gates as a band [B, H, N, C, U]; None = identity (c = 1)


def _decay_matrices(gates: Gates) -> tuple[torch.Tensor, ...]:
    """keep: A [i, m] = prod_{r=m+1}^{i} (1 - alpha_r), zero on padding columns m;
    carry: E [m, s] = prod_{r=s+1}^{m} eta_r; and their from-the-chunk-start cumulative forms."""
    keep_log = segment_sum(gates.log_keep).masked_fill(~gates.valid[..., None, :], float("-inf"))
    keep = torch.exp(keep_log)
    carry = torch.exp(segment_sum(gates.log_momentum))
    keep_from_start = torch.exp(gates.log_keep.cumsum(-1))
    carry_from_start = torch.exp(gates.log_momentum.cumsum(-1))
    return keep, carry, keep_from_start, carry_from_start


def _apply_band(coef: torch.Tensor, band: torch.Tensor | None) -> torch.Tensor:
    """Fold the Omega window in: per-token gradient weights [.., s] -> per key column [.., u]."""
    return coef if band is None else coef @ band


@dataclass
class PlainCoefficients:
    read_decay: torch.Tensor  # [B, H, N, C]
    read_momentum: torch.Tensor  # [B, H, N, C]
    read_grad: torch.Tensor  # [B, H, N, C, U]
    end_decay: torch.Tensor  # [B, H, N]
    end_momentum: torch.Tensor  # [B, H, N]
    end_grad: torch.Tensor  # [B, H, N, U]
    momentum_decay: torch.Tensor  # [B, H, N]
    momentum_grad: torch.Tensor  # [B, H, N, U]


def plain_coefficients(gates: Gates, read: str) -> PlainCoefficients:
    """Titans momentum: S_t = eta_t S_{t-1} - theta_t G_t, W_t = (1 - alpha_t) W_{t-1} + S_t."""
    keep, carry, keep_from_start, carry_from_start = _decay_matrices(gates)
    momentum_into_weights = (keep @ carry_from_start.unsqueeze(-1)).squeeze(-1)
    grad = _apply_band((keep @ carry) * gates.lr.unsqueeze(-2), gates.band)  # [.., C, U]
    momentum_grad = _apply_band(carry[..., -1:, :] * gates.lr.unsqueeze(-2), gates.band)
    read_decay, read_momentum, read_grad = keep_from_start, momentum_into_weights, grad
    if read == "before":
        read_decay = _shift_rows(read_decay, 1.0, dim=-1)
        read_momentum = _shift_rows(read_momentum, 0.0, dim=-1)
        read_grad = _shift_rows(read_grad, 0.0, dim=-2)
    return PlainCoefficients(
        read_decay=read_decay,
        read_momentum=read_momentum,
        read_grad=read_grad,
        end_decay=keep_from_start[..., -1],
        end_momentum=momentum_into_weights[..., -1],
        end_grad=grad[..., -1, :],
        momentum_decay=carry_from_start[..., -1],
        momentum_grad=momentum_grad.squeeze(-2),
    )


@dataclass
class MuonCoefficients:
    rows_momentum: torch.Tensor  # [B, H, N, M]: S_m = rows_momentum_m S0 + sum_u rows_grad_mu G_u
    rows_grad: torch.Tensor  # [B, H, N, M, U]
    read_decay: torch.Tensor  # [B, H, N, C]
    read_update: torch.Tensor  # [B, H, N, C, M]
    end_decay: torch.Tensor  # [B, H, N]
    end_update: torch.Tensor  # [B, H, N, M]


def muon_coefficients(gates: Gates, read: str, per_chunk: bool) -> MuonCoefficients:
    """Muon: S_t = eta_t S_{t-1} + G_t, W_t = (1 - alpha_t) W_{t-1} - theta_t NS5(S_t); with
    ``per_chunk`` the NS5 step is taken only at the token that closes a chunk (row C - 1)."""
    keep, carry, keep_from_start, carry_from_start = _decay_matrices(gates)
    if per_chunk:
        rows_momentum = carry_from_start[..., -1:]
        rows_grad = _apply_band(carry[..., -1:, :], gates.band)
        closes = gates.lr[..., -1] * gates.valid[..., -1]  # [B, H, N]
        update = torch.zeros_like(gates.lr).unsqueeze(-1)  # [B, H, N, C, 1]
        update = torch.cat([update[..., :-1, :], closes[..., None, None]], dim=-2)
    else:
        rows_momentum = carry_from_start
        rows_grad = _apply_band(carry, gates.band)
        update = keep * gates.lr.unsqueeze(-2)  # [.., C, C]
    read_decay, read_update = keep_from_start, update
    if read == "before":
        read_decay = _shift_rows(read_decay, 1.0, dim=-1)
        read_update = _shift_rows(read_update, 0.0, dim=-2)
    return MuonCoefficients(
        rows_momentum=rows_momentum,
        rows_grad=rows_grad,
        read_decay=read_decay,
        read_update=read_update,
        end_decay=keep_from_start[..., -1],
        end_update=update[..., -1, :],
    )
