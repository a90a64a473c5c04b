"""ATLAS polynomial feature map (ATLAS Section 3.1; docs/architectures.md).

Axes: any leading axes, then the feature axis D. ``phi_p(x)`` stacks every monomial of x of
degree 0..p -- combinations with replacement, so each monomial appears once -- and scales the
degree-i block by ``coefficients[i]`` (learnable in a layer, initialised to 1/i!).
"""

from __future__ import annotations

from functools import lru_cache

import torch

from ..common.feature_maps import (  # noqa: F401  (polynomial_width: re-exported)
    check_polynomial,
    monomials,
    polynomial_width,
    taylor_scales,
)
from ..validation import check_int


def default_polynomial_coefficients(
    degree: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The initial block scales 1/i!, i = 0..degree (the Taylor coefficients of exp)."""
    return torch.tensor(taylor_scales(degree), dtype=dtype)


@lru_cache(maxsize=32)
def _cached_monomial_indices(dim: int, degree: int) -> torch.Tensor:
    return torch.tensor(monomials(dim, degree), dtype=torch.long)


def monomial_indices(dim: int, degree: int, device: torch.device) -> torch.Tensor:
    """``[n_monomials, degree]`` variable indices of each degree-``degree`` monomial, in
    ``itertools.combinations_with_replacement`` order. Eager calls reuse a cached table;
    ``torch.compile`` cannot trace the cache (a graph break), so a traced call builds the same
    table from tensor ops of static shape (tests/ops/test_atlas.py checks they agree)."""
    if torch.compiler.is_compiling():
        every = torch.cartesian_prod(*[torch.arange(dim, device=device)] * degree)  # [dim^p, p]
        sorted_rows = (every[:, 1:] >= every[:, :-1]).all(dim=-1)  # one row per monomial
        count = 1  # C(dim - 1 + p, p) by products: math.comb refuses a symbolic dim
        for i in range(1, degree + 1):
            count = count * (dim - 1 + i) // i
        rows = torch.nonzero_static(sorted_rows, size=count)
        return every[rows[:, 0]]
    return _cached_monomial_indices(dim, degree).to(device)


def polynomial_features(
    x: torch.Tensor, degree: int, coefficients: torch.Tensor | None = None
) -> torch.Tensor:
    """phi_p(x): ``[..., D]`` -> ``[..., C(D + p, p)]``, blocks ordered by degree 0, 1, ..., p.

    ``coefficients`` ``[p + 1]`` scales the blocks (default 1/i!).
    """
    check_int("degree", degree, 1)
    if coefficients is None:
        coefficients = default_polynomial_coefficients(degree, x.dtype).to(x.device)
    check_polynomial(degree, tuple(coefficients.shape))
    coefficients = coefficients.to(x.dtype)
    blocks = [coefficients[0] * torch.ones_like(x[..., :1]), coefficients[1] * x]
    for i in range(2, degree + 1):
        index = monomial_indices(x.shape[-1], i, x.device)  # [n_i, i]
        blocks.append(coefficients[i] * x[..., index].prod(dim=-1))  # [..., n_i, i] -> [..., n_i]
    return torch.cat(blocks, dim=-1)
