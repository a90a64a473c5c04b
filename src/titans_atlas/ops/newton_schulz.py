"""Muon's orthogonalisation: the quintic Newton-Schulz iteration (ATLAS; docs/memory.md, section 7).

Axes: any leading batch axes, then a matrix ``[..., rows, cols]``; both forms work on the wide
orientation (m = rows <= n = cols) and transpose back.

``newton_schulz5_reference`` is Muon's iteration, literally, differentiated by autograd.
``newton_schulz5`` computes the same arithmetic with each step fused into three batched BLAS
calls and has a hand-written backward that saves only its input and the input's norm: the
backward recomputes the iterates (one more forward), then runs the reversed steps (~1.5
forwards), about as much work as autograd through the literal form (~3 forwards) without
keeping 5 x (one m x n + two m x m) tensors per matrix alive between forward and backward.
(Iterating in the m x m Gram space would need 1.8x fewer flops, but in float32 it is several
times less precise on low-rank momenta -- enough to break the streaming tolerance of Muon
models; docs/memory.md.)
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

NS5_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def safe_frobenius_norm(x: torch.Tensor) -> torch.Tensor:
    """||x||_F over the last two axes (keepdim) whose gradient at x = 0 is 0, not NaN."""
    squared = (x * x).sum(dim=(-2, -1), keepdim=True)
    nonzero = squared > 0
    # Double where: sqrt's infinite slope at 0 must never be evaluated, even where masked out.
    return torch.where(nonzero, torch.sqrt(torch.where(nonzero, squared, 1.0)), 0.0)


def _wide_and_normalised(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, bool]:
    if x.ndim < 2:
        raise ValueError(f"x must have at least 2 dimensions, got shape {list(x.shape)}")
    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = x.transpose(-1, -2)
    return x / (safe_frobenius_norm(x) + eps), tall


def newton_schulz5_reference(x: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """X = x / (||x||_F + eps), then ``steps`` of A = X X^T, X = a X + (b A + c A A) X."""
    a, b, c = NS5_COEFFICIENTS
    x, tall = _wide_and_normalised(x, eps)
    for _ in range(steps):
        gram = x @ x.transpose(-1, -2)
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.transpose(-1, -2) if tall else x


def _iterate(x: torch.Tensor, steps: int, keep: bool) -> tuple[torch.Tensor, list]:
    """X_steps of ``x`` ``[batch, m, n]``; with ``keep``, per step (X_k, G_k = X_k X_k^T,
    P_k = b G_k + c G_k^2) for the backward."""
    a, b, c = NS5_COEFFICIENTS
    iterates = []
    for _ in range(steps):
        gram = torch.bmm(x, x.transpose(-1, -2))
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)  # b A + c A A
        if keep:
            iterates.append((x, gram, poly))
        x = torch.baddbmm(x, poly, x, beta=a)  # a X + (b A + c A A) X
    return x, iterates


class _NewtonSchulz5(torch.autograd.Function):
    """NS5 of ``x`` ``[batch, m, n]`` (m <= n), normalisation included. Saves x and its norm;
    backward recomputes the iterates (memory O(one call), not O(5 steps) per saved call)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, steps: int, eps: float) -> torch.Tensor:
        norm = safe_frobenius_norm(x)
        out, _ = _iterate(x / (norm + eps), steps, keep=False)  # forward runs without grad
        ctx.save_for_backward(x, norm)
        ctx.steps, ctx.eps = steps, eps
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        # Step Y = a X + P X with P = b G + c G^2, G = X X^T (G and P symmetric):
        #   dX = a dY + P dY + (dG + dG^T) X,  dP = dY X^T,  dG = b dP + c (dP G + G dP).
        # With Q = dP + dP^T (symmetric): dG + dG^T = b Q + c (Q G + (Q G)^T): one m^3 product.
        a, b, c = NS5_COEFFICIENTS
        x, norm = ctx.saved_tensors
        _, iterates = _iterate(x / (norm + ctx.eps), ctx.steps, keep=True)
        for x_k, gram, poly in reversed(iterates):
            d_poly = torch.bmm(grad, x_k.transpose(-1, -2))
            sym = d_poly + d_poly.transpose(-1, -2)
            mixed = torch.bmm(sym, gram)
            d_gram_sym = torch.add(mixed, mixed.transpose(-1, -2), alpha=1.0).mul_(c)
            d_gram_sym.add_(sym, alpha=b)
            grad = torch.baddbmm(grad, poly, grad, beta=a)
            grad = torch.baddbmm(grad, d_gram_sym, x_k)
        # X_0 = x s with s = 1 / (||x|| + eps): dx = s dX_0 - s^2 <dX_0, x> / ||x|| x (0 at x = 0)
        scale = 1.0 / (norm + ctx.eps)
        inner = (grad * x).sum(dim=(-2, -1), keepdim=True)
        safe_norm = torch.where(norm > 0, norm, 1.0)
        return (
            scale * grad - torch.where(norm > 0, scale**2 * inner / safe_norm, 0.0) * x,
            None,
            None,
        )


def newton_schulz5(x: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """The same function as ``newton_schulz5_reference``: fused steps, and a backward that
    recomputes the iterates from the saved input."""
    if x.ndim < 2:
        raise ValueError(f"x must have at least 2 dimensions, got shape {list(x.shape)}")
    tall = x.shape[-2] > x.shape[-1]
    wide = x.transpose(-1, -2) if tall else x
    shape = wide.shape
    out = _NewtonSchulz5.apply(wide.reshape(-1, *shape[-2:]), steps, eps).reshape(shape)
    return out.transpose(-1, -2) if tall else out
