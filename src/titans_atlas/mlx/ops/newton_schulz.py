"""Muon's orthogonalisation in MLX: the quintic Newton-Schulz iteration (docs/memory.md).

Axes: any leading batch axes, then a matrix ``[..., rows, cols]``; both forms work on the wide
orientation (rows <= cols) and transpose back. ``newton_schulz5_reference`` is the literal
iteration; ``newton_schulz5`` is the same arithmetic under ``mx.compile`` (one fused graph per
shape; MLX's autodiff differentiates it, so no hand-written backward is needed).
Both compute in at least float32 and return x's dtype, as the torch side does: half-precision
iterates lose the small singular directions that five steps amplify.
"""

from __future__ import annotations

import mlx.core as mx

from ...common.newton_schulz import ns5_iterate


def safe_frobenius_norm(x: mx.array) -> mx.array:
    """||x||_F over the last two axes (keepdims) whose gradient at x = 0 is 0, not NaN."""
    squared = (x * x).sum(axis=(-2, -1), keepdims=True)
    nonzero = squared > 0
    # Double where: sqrt's infinite slope at 0 must never be evaluated, even where masked out.
    return mx.where(nonzero, mx.sqrt(mx.where(nonzero, squared, 1.0)), 0.0)


def _compute_dtype(x: mx.array) -> mx.Dtype:
    """NS5 runs in at least float32 (float64 stays float64)."""
    return x.dtype if x.dtype == mx.float64 else mx.float32


def _check(x: mx.array) -> None:
    if x.ndim < 2:
        raise ValueError(f"x must have at least 2 dimensions, got shape {list(x.shape)}")


def _iterate(x: mx.array, steps: int, eps: float) -> mx.array:
    """The iteration on a wide ``x`` (``common/newton_schulz.py``)."""
    return ns5_iterate(x, steps, eps, safe_frobenius_norm, lambda m: mx.swapaxes(m, -1, -2))


def newton_schulz5_reference(x: mx.array, steps: int = 5, eps: float = 1e-7) -> mx.array:
    """X = x / (||x||_F + eps), then ``steps`` Newton-Schulz steps; tall inputs transposed."""
    _check(x)
    tall, dtype = x.shape[-2] > x.shape[-1], x.dtype
    out = _iterate((mx.swapaxes(x, -1, -2) if tall else x).astype(_compute_dtype(x)), steps, eps)
    return (mx.swapaxes(out, -1, -2) if tall else out).astype(dtype)


_COMPILED: dict[tuple[int, float], object] = {}


def newton_schulz5(x: mx.array, steps: int = 5, eps: float = 1e-7) -> mx.array:
    """The same function as ``newton_schulz5_reference``, compiled per (steps, eps)."""
    _check(x)
    key = (steps, eps)
    if key not in _COMPILED:
        _COMPILED[key] = mx.compile(lambda wide: _iterate(wide, steps, eps))
    tall, dtype = x.shape[-2] > x.shape[-1], x.dtype
    out = _COMPILED[key]((mx.swapaxes(x, -1, -2) if tall else x).astype(_compute_dtype(x)))
    return (mx.swapaxes(out, -1, -2) if tall else out).astype(dtype)
