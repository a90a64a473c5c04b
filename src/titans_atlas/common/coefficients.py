"""The bundles the chunked scan passes around, named once for both backends: the gates on
the chunk grid and the coefficients of each update rule (docs/memory.md, section 3; the
symbols are the table in ops/README.md). ``ops/coefficients.py`` fills them with torch
tensors, ``mlx/ops/coefficients.py`` with MLX arrays -- same fields, same names.

Axes: B batch, H heads, N chunks, C chunk size, U = C + c - 1 key columns, M rows whose Muon
momentum is materialised (C per-token, 1 per-chunk).
"""

from __future__ import annotations

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
