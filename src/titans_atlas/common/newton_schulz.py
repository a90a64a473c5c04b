"""Muon's quintic Newton-Schulz iteration (docs/memory.md, section 7) in array operators, once
for both backends: ``ops/newton_schulz.py`` (whose fused torch form and the Triton kernel use
the same coefficients) and ``mlx/ops/newton_schulz.py`` supply the norm and the transpose.

Axes: any leading batch axes, then a wide matrix ``[..., m, n]``, m <= n.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NS5_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def ns5_iterate(
    x: Any,
    steps: int,
    eps: float,
    frobenius_norm: Callable[[Any], Any],
    transpose: Callable[[Any], Any],
) -> Any:
    """X = x / (||x||_F + eps), then ``steps`` of A = X X^T, X = a X + (b A + c A A) X, on a
    wide ``x``; ``frobenius_norm`` over the last two axes (keepdims), ``transpose`` of them."""
    a, b, c = NS5_COEFFICIENTS
    x = x / (frobenius_norm(x) + eps)
    for _ in range(steps):
        gram = x @ transpose(x)
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x
