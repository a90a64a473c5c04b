"""The ATLAS polynomial feature map's rules, for both backends (``ops/feature_maps.py``,
``mlx/ops/feature_maps.py``): its width, its default block scales, the monomials of each
degree and the checks of its arguments. phi_p(x): ``[..., D]`` -> ``[..., C(D + p, p)]``.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

from ..validation import check_int

MAX_POLYNOMIAL_WIDTH = 2**17  # degree 3 of a 64-wide head is 47,905; 2 of a 256-wide 33,153


def polynomial_width(dim: int, degree: int) -> int:
    """Number of monomials of degree 0..degree in ``dim`` variables: C(dim + degree, degree)."""
    width = math.comb(dim + degree, degree)
    if width > MAX_POLYNOMIAL_WIDTH:  # its memory would not fit: refuse before allocating
        raise ValueError(
            f"poly_degree={degree} maps a {dim}-wide head to {width:,} features; at most "
            f"{MAX_POLYNOMIAL_WIDTH:,} (a lower poly_degree, or narrower heads)"
        )
    return width


def taylor_scales(degree: int) -> list[float]:
    """The default block scales 1/i!, i = 0..degree (the Taylor coefficients of exp)."""
    return [1.0 / math.factorial(i) for i in range(degree + 1)]


@lru_cache(maxsize=32)
def monomials(dim: int, degree: int) -> tuple[tuple[int, ...], ...]:
    """The variable indices of each degree-``degree`` monomial in ``dim`` variables, in
    ``itertools.combinations_with_replacement`` order."""
    return tuple(itertools.combinations_with_replacement(range(dim), degree))


def check_polynomial(degree: int, coefficients_shape: tuple[int, ...]) -> None:
    """``degree`` >= 1 and one block scale per degree 0..degree (ValueError naming them)."""
    check_int("degree", degree, 1)
    if tuple(coefficients_shape) != (degree + 1,):
        raise ValueError(
            f"coefficients must have shape [{degree + 1}] (one per degree 0..{degree}), "
            f"got {list(coefficients_shape)}"
        )
