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

Precision: both forms compute in at least fp32 and return x's dtype. In fp16 the squares of
the norm underflow (entries below ~2e-4) or overflow (above 256), and even with an fp32 norm,
half-precision iterates lose the small singular directions that five steps amplify ~487x
(fp16 Muon scans then differ from fp32 by ~10%; with fp32 iterates by ~1e-3).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from ..common.newton_schulz import NS5_COEFFICIENTS, ns5_iterate


def safe_frobenius_norm(x: torch.Tensor) -> torch.Tensor:
    """||x||_F over the last two axes (keepdim) whose gradient at x = 0 is 0, not NaN."""
    squared = (x * x).sum(dim=(-2, -1), keepdim=True)
    nonzero = squared > 0
    # Double where: sqrt's infinite slope at 0 must never be evaluated, even where masked out.
    return torch.where(nonzero, torch.sqrt(torch.where(nonzero, squared, 1.0)), 0.0)


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """NS5 runs in at least fp32 (module docstring: fp16/bf16 lose what NS5 amplifies)."""
    return torch.promote_types(x.dtype, torch.float32)


def _check_matrix(x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or x.ndim < 2:
        got = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be a tensor with at least 2 dimensions, got {got}")
    if not x.is_floating_point():
        raise ValueError(f"x must be floating point, got {x.dtype}")


def newton_schulz5_reference(x: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """X = x / (||x||_F + eps), then ``steps`` of A = X X^T, X = a X + (b A + c A A) X."""
    _check_matrix(x)
    dtype, tall = x.dtype, x.shape[-2] > x.shape[-1]
    x = (x.transpose(-1, -2) if tall else x).to(compute_dtype(x))
    x = ns5_iterate(x, steps, eps, safe_frobenius_norm, lambda m: m.transpose(-1, -2))
    return (x.transpose(-1, -2) if tall else x).to(dtype)


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
    """NS5 of ``x`` ``[batch, m, n]`` (m <= n), normalisation included. Saves x and its norm,
    and the iterates only when asked (``save_iterates``); otherwise backward recomputes them."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, steps: int, eps: float, save_iterates: bool) -> torch.Tensor:
        wide = x.to(compute_dtype(x))  # x itself is saved: no fp32 copy outlives the call
        norm = safe_frobenius_norm(wide)
        out, iterates = _iterate(wide / (norm + eps), steps, keep=save_iterates)
        ctx.save_for_backward(x, norm, *[t for step in iterates for t in step])
        ctx.steps, ctx.eps = steps, eps
        return out.to(x.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        # Step Y = a X + P X with P = b G + c G^2, G = X X^T (G and P symmetric):
        #   dX = a dY + P dY + (dG + dG^T) X,  dP = dY X^T,  dG = b dP + c (dP G + G dP).
        # With Q = dP + dP^T (symmetric): dG + dG^T = b Q + c (Q G + (Q G)^T): one m^3 product.
        a, b, c = NS5_COEFFICIENTS
        x, norm, *saved = ctx.saved_tensors
        wide, grad = x.to(norm.dtype), grad.to(norm.dtype)
        if saved:
            iterates = [saved[i : i + 3] for i in range(0, len(saved), 3)]
        else:
            _, iterates = _iterate(wide / (norm + ctx.eps), ctx.steps, keep=True)
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
        inner = (grad * wide).sum(dim=(-2, -1), keepdim=True)
        safe_norm = torch.where(norm > 0, norm, 1.0)
        d_x = scale * grad - torch.where(norm > 0, scale**2 * inner / safe_norm, 0.0) * wide
        return d_x.to(x.dtype), None, None, None


def newton_schulz5(
    x: torch.Tensor, steps: int = 5, eps: float = 1e-7, *, save_iterates: bool = False
) -> torch.Tensor:
    """The same function as ``newton_schulz5_reference``: fused steps, and a backward that
    recomputes the iterates from the saved input -- unless ``save_iterates``, which keeps
    them instead: right inside activation checkpointing, whose recompute already re-runs
    this forward just before the backward (and whose first forward keeps nothing). Without
    grad mode there is no backward, and nothing is kept."""
    _check_matrix(x)
    keep = save_iterates and torch.is_grad_enabled()
    return on_wide_matrices(lambda flat: _NewtonSchulz5.apply(flat, steps, eps, keep), x)


def on_wide_matrices(fn, x: torch.Tensor) -> torch.Tensor:
    """``fn`` of x's matrices as one batch ``[P, m, n]`` in the wide orientation (m <= n, a tall
    x transposed), its result laid back out as x: the fast forms' shared layout."""
    tall = x.shape[-2] > x.shape[-1]
    wide = x.transpose(-1, -2) if tall else x
    out = fn(wide.reshape(-1, *wide.shape[-2:])).reshape(wide.shape)
    return out.transpose(-1, -2) if tall else out
