"""The end-of-chunk update of rule "momentum" with a fused backward (for the chunked scan).

Axes: G = B * H independent memories, m x n one weight matrix, U key columns. Symbols as in
docs/memory.md (section 4, "Chunk end"); arguments are named like the ``MomentumCoefficients``
fields they come from:

    W_end = end_keep W0 + end_momentum S0 - a^T end_rows     beta_{C-1}, mu_{C-1}, K[C-1, u] b_u
    S_end = momentum_carry S0 - a^T momentum_rows            e_{C-1}, kappa_u b_u

Autograd through the plain expression spends ~15 elementwise passes over the weight-sized
tensors in backward (scalar broadcasts, sign flips, accumulations); this backward needs about
six: three scaled copies and three batched dot products for the per-memory scalars.
"""

from __future__ import annotations

from functools import partial

import torch
from torch.autograd.function import once_differentiable


def _dot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-memory Frobenius inner product of ``[G, m, n]`` tensors -> ``[G, 1, 1]``. (As a
    ``[G, 1, mn] @ [G, mn, 1]`` bmm it ran 7-12x slower on CPU: a degenerate matmul shape.)"""
    return torch.linalg.vecdot(x.flatten(1), y.flatten(1)).view(-1, 1, 1)


class _DecayedRankUpdate(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, weights, momentum, end_keep, end_momentum, momentum_carry, a_t, end_rows, momentum_rows
    ):
        new_weights = weights * end_keep
        new_weights.addcmul_(momentum, end_momentum).baddbmm_(a_t, end_rows, alpha=-1.0)
        new_momentum = (momentum * momentum_carry).baddbmm_(a_t, momentum_rows, alpha=-1.0)
        ctx.save_for_backward(
            weights, momentum, end_keep, end_momentum, momentum_carry, a_t, end_rows, momentum_rows
        )
        return new_weights, new_momentum

    @staticmethod
    @once_differentiable
    def backward(ctx, d_weights, d_momentum):
        weights, momentum, end_keep, end_momentum, momentum_carry, a_t, end_rows, momentum_rows = (
            ctx.saved_tensors
        )
        d_weights, d_momentum = d_weights.contiguous(), d_momentum.contiguous()
        d_a_t = torch.baddbmm(
            d_weights @ end_rows.transpose(1, 2), d_momentum, momentum_rows.transpose(1, 2)
        ).neg_()
        return (
            d_weights * end_keep,  # weights
            torch.addcmul(d_weights * end_momentum, d_momentum, momentum_carry),  # momentum
            _dot(d_weights, weights),  # end_keep
            _dot(d_weights, momentum),  # end_momentum
            _dot(d_momentum, momentum),  # momentum_carry
            d_a_t,
            -(a_t.transpose(1, 2) @ d_weights),  # end_rows
            -(a_t.transpose(1, 2) @ d_momentum),  # momentum_rows
        )


def decayed_rank_update(
    weights: torch.Tensor,
    momentum: torch.Tensor,
    *,
    end_keep: torch.Tensor,
    end_momentum: torch.Tensor,
    momentum_carry: torch.Tensor,
    a_t: torch.Tensor,
    end_rows: torch.Tensor,
    momentum_rows: torch.Tensor,
    fused: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W_end, S_end)`` for ``[G, m, n]`` weights W0 and momentum S0, ``[G, 1, 1]`` scalars
    ``end_keep``, ``end_momentum``, ``momentum_carry``, ``a_t`` ``[G, m, U]`` and
    ``end_rows`` / ``momentum_rows`` ``[G, U, n]``. ``fused=False``: the same expression,
    differentiated by autograd (the parity oracle)."""
    if fused:
        return _DecayedRankUpdate.apply(
            weights, momentum, end_keep, end_momentum, momentum_carry, a_t, end_rows, momentum_rows
        )
    new_weights = end_keep * weights + end_momentum * momentum - a_t @ end_rows
    return new_weights, momentum_carry * momentum - a_t @ momentum_rows


# The parity oracle of the fused backward: the plain expression under autograd.
decayed_rank_update_reference = partial(decayed_rank_update, fused=False)
