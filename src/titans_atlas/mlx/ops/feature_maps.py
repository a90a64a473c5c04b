"""ATLAS polynomial feature map in MLX (mirrors ``titans_atlas.ops.feature_maps``).

Axes: any leading axes, then the feature axis D. ``phi_p(x)`` stacks every monomial of x of
degree 0..p (combinations with replacement) and scales the degree-i block by
``coefficients[i]`` (learnable in a layer, initialised to 1/i!).
"""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx
import numpy as np

from ...common.feature_maps import (  # noqa: F401  (polynomial_width: re-exported)
    check_polynomial,
    monomials,
    polynomial_width,
    taylor_scales,
)


def default_polynomial_coefficients(degree: int, dtype: mx.Dtype = mx.float32) -> mx.array:
    """The initial block scales 1/i!, i = 0..degree."""
    return mx.array(taylor_scales(degree), dtype=dtype)


@lru_cache(maxsize=32)
def _monomial_indices(dim: int, degree: int) -> np.ndarray:
    """``[n_monomials, degree]`` variable indices of each degree-``degree`` monomial."""
    return np.array(monomials(dim, degree), dtype=np.int32)


def polynomial_features(x: mx.array, degree: int, coefficients: mx.array | None = None) -> mx.array:
    """phi_p(x): ``[..., D]`` -> ``[..., C(D + p, p)]``, blocks ordered by degree 0, 1, ..., p."""
    if coefficients is None:
        coefficients = default_polynomial_coefficients(max(degree, 1), x.dtype)
    check_polynomial(degree, tuple(coefficients.shape))
    coefficients = coefficients.astype(x.dtype)
    blocks = [coefficients[0] * mx.ones_like(x[..., :1]), coefficients[1] * x]
    for i in range(2, degree + 1):
        index = mx.array(_monomial_indices(x.shape[-1], i))  # [n_i, i]
        blocks.append(coefficients[i] * mx.prod(x[..., index], axis=-1))  # [..., n_i]
    return mx.concatenate(blocks, axis=-1)
