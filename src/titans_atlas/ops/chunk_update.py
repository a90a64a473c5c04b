"""The end-of-chunk state update with a fused backward (used by the chunked scan).

Axes: G = B * H independent memories, P = d_in x d_out one weight matrix, U key columns.

    W' = beta W + carry S - a^T p          (W_end of docs/memory.md, section 4)
    S' = eta S - a^T r

Autograd through the plain expression spends ~15 elementwise passes over the weight-sized
tensors in backward (scalar broadcasts, sign flips, accumulations); this backward needs about
six: three scaled copies and three batched dot products for the per-memory scalars.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


def _dot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-memory Frobenius inner product of ``[G, m, n]`` tensors -> ``[G, 1, 1]``."""
    return torch.bmm(x.reshape(x.shape[0], 1, -1), y.reshape(y.shape[0], -1, 1))


class _DecayedRankUpdate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weights, momentum, beta, carry, eta, at, p, r):
        new_weights = weights * beta
        new_weights.addcmul_(momentum, carry).baddbmm_(at, p, alpha=-1.0)
        new_momentum = (momentum * eta).baddbmm_(at, r, alpha=-1.0)
        ctx.save_for_backward(weights, momentum, beta, carry, eta, at, p, r)
        return new_weights, new_momentum

    @staticmethod
    @once_differentiable
    def backward(ctx, d_weights, d_momentum):
        weights, momentum, beta, carry, eta, at, p, r = ctx.saved_tensors
        d_weights, d_momentum = d_weights.contiguous(), d_momentum.contiguous()
        grads = (
            d_weights * beta,  # weights
            torch.addcmul(d_weights * carry, d_momentum, eta),  # momentum
            _dot(d_weights, weights),  # beta
            _dot(d_weights, momentum),  # carry
            _dot(d_momentum, momentum),  # eta
            torch.baddbmm(d_weights @ p.transpose(1, 2), d_momentum, r.transpose(1, 2)).neg_(),
            -(at.transpose(1, 2) @ d_weights),  # p
            -(at.transpose(1, 2) @ d_momentum),  # r
        )
        return grads


def decayed_rank_update(
    weights: torch.Tensor,
    momentum: torch.Tensor,
    beta: torch.Tensor,
    carry: torch.Tensor,
    eta: torch.Tensor,
    at: torch.Tensor,
    p: torch.Tensor,
    r: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(beta W + carry S - at @ p, eta S - at @ r)`` for ``[G, m, n]`` matrices, ``[G, 1, 1]``
    scalars, ``at`` ``[G, m, U]``, ``p``/``r`` ``[G, U, n]``."""
    return _DecayedRankUpdate.apply(weights, momentum, beta, carry, eta, at, p, r)


def decayed_rank_update_reference(weights, momentum, beta, carry, eta, at, p, r):
    """The same expression, differentiated by autograd (the parity oracle)."""
    return beta * weights + carry * momentum - at @ p, eta * momentum - at @ r
