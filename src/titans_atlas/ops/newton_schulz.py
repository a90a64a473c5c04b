"""Muon's orthogonalisation: the quintic Newton-Schulz iteration (ATLAS, spec/memory.md).

Axes: any leading batch axes, then a matrix ``[..., rows, cols]``.
"""

from __future__ import annotations

import torch

NS5_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def safe_frobenius_norm(x: torch.Tensor) -> torch.Tensor:
    """||x||_F over the last two axes (keepdim) whose gradient at x = 0 is 0, not NaN."""
    squared = (x * x).sum(dim=(-2, -1), keepdim=True)
    nonzero = squared > 0
    # Double where: sqrt's infinite slope at 0 must never be evaluated, even where masked out.
    return torch.where(nonzero, torch.sqrt(torch.where(nonzero, squared, 1.0)), 0.0)


def newton_schulz5(x: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """Approximately orthogonalise each matrix: X = x / (||x||_F + eps), then ``steps`` of
    A = X X^T, X = a X + (b A + c A A) X, working on the wide orientation. ``[..., m, n]``."""
    if x.ndim < 2:
        raise ValueError(f"x must have at least 2 dimensions, got shape {list(x.shape)}")
    a, b, c = NS5_COEFFICIENTS
    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = x.transpose(-1, -2)
    x = x / (safe_frobenius_norm(x) + eps)
    for _ in range(steps):
        gram = x @ x.transpose(-1, -2)
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.transpose(-1, -2) if tall else x
