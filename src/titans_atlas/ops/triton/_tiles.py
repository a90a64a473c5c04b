"""Small Triton helpers shared by the fused kernels: masked tile I/O and activations.

Every tile is a power-of-two block (Triton's rule) of at least 16 in each dimension
(``tl.dot``'s minimum on the GPU); rows and columns past the real size are masked to 0 on
load and dropped on store, so padding never changes a result.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

GELU, SILU = 0, 1  # activation codes passed as constexpr
# tl.dot input precision for float32: exact ("ieee", the default, as the torch form), three
# TF32 products ("tf32x3", about float32 accuracy on tensor cores) or one ("tf32", ~1e-3).
PRECISIONS = ("ieee", "tf32x3", "tf32")


@contextmanager
def fitting(kernel: str, shape: str) -> Iterator[None]:
    """Turn Triton's OutOfResources at a launch into a ValueError that says what to use
    instead. Measured on an H200 (docs/gpu.md): at head 64 x hidden 256 the MLP kernels need
    more shared memory than an sm_90 block may have."""
    try:
        yield
    except OutOfResources as error:
        raise ValueError(
            f"impl='triton' cannot run {kernel} at {shape} on this GPU: it needs "
            f"{error.required} of {error.name}, the device allows {error.limit}. Use "
            "impl='chunk' (what impl='auto' runs), or smaller widths (docs/gpu.md)"
        ) from None


def interpreter_requested() -> bool:
    """Whether ``triton.jit`` defines kernels for the CPU interpreter now (TRITON_INTERPRET)."""
    try:
        from triton import knobs
    except ImportError:  # Triton < 3.4 reads the variable directly
        return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
    return bool(knobs.runtime.interpret)


def interpreting() -> bool:
    """Whether triton.language itself runs in the interpreter: TRITON_INTERPRET=1 was set
    before triton was first imported (its own jitted functions, ``tl.sum`` among them, are
    defined at that import; torch imports triton too, e.g. with its flop counter)."""
    return type(tl.sum).__name__ == "InterpretedFunction"


def device_function(fn):
    """``triton.jit`` for a function called from a kernel. Under the CPU interpreter it stays
    a plain Python function instead: the interpreter re-patches ``triton.language`` on every
    call of a jitted helper (milliseconds each), which dominated the test time; the body is
    the same code either way, and a compiled kernel inlines it."""
    return fn if interpreter_requested() else triton.jit(fn)


def block(size: int) -> int:
    """Block width for a dimension of ``size``: the next power of two, at least 16."""
    return max(16, triton.next_power_of_2(size))


@device_function
def load_tile(ptr, rows, cols, n_rows, n_cols, stride):
    """``ptr[rows, cols]`` of a row-major matrix with ``stride``; 0 outside it. (A load or store
    that depends on a runtime condition passes ``n_rows = tl.where(cond, rows, 0)``: the
    interpreter cannot AND a block mask with a scalar condition.)"""
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    return tl.load(ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0)


@device_function
def store_tile(ptr, value, rows, cols, n_rows, n_cols, stride):
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    tl.store(ptr + rows[:, None] * stride + cols[None, :], value, mask=mask)


@device_function
def load_row(ptr, idx, n):
    return tl.load(ptr + idx, mask=idx < n, other=0.0)


@device_function
def store_row(ptr, value, idx, n):
    tl.store(ptr + idx, value, mask=idx < n)


@device_function
def activation(z, ACT: tl.constexpr):
    """GELU (exact, erf form) or SiLU, and their first and second derivatives."""
    if ACT == 0:
        # Irrational constants as tensors of z's dtype: a Python float literal is an fp32
        # constant in compiled Triton and would cost float64 its precision.
        inv_sqrt2 = tl.full([1], 0.7071067811865476, z.dtype)
        inv_sqrt_2pi = tl.full([1], 0.3989422804014327, z.dtype)
        cdf = 0.5 * (1.0 + tl.math.erf(z * inv_sqrt2))
        pdf = tl.exp(-0.5 * z * z) * inv_sqrt_2pi
        return z * cdf, cdf + z * pdf, pdf * (2.0 - z * z)
    else:
        s = tl.sigmoid(z)
        return z * s, s * (1.0 + z * (1.0 - s)), s * (1.0 - s) * (2.0 + z * (1.0 - 2.0 * s))


@device_function
def load_chunk_coefficients(
    rd, rm, rg, ed, em, eg, md, mg, cn, C, U, BC: tl.constexpr, BU: tl.constexpr
):
    """Chunk ``cn``'s coefficients (docs/memory.md, sections 3-4; coefficients.py):
    read rows [C], the read weight matrix [C, U], end-of-chunk scalars and columns [U]."""
    i, u = tl.arange(0, BC), tl.arange(0, BU)
    read_keep = load_row(rd + cn * C, i, C)
    read_momentum = load_row(rm + cn * C, i, C)
    read_grad = load_tile(rg + cn * C * U, i, u, C, U, U)
    end_grad = load_row(eg + cn * U, u, U)
    momentum_grad = load_row(mg + cn * U, u, U)
    scalars = (tl.load(ed + cn), tl.load(em + cn), tl.load(md + cn))
    return read_keep, read_momentum, read_grad, scalars, end_grad, momentum_grad


@device_function
def load_anchor_coefficients(ra, ea, cn, C, BC: tl.constexpr):
    """Chunk ``cn``'s decay-target coefficients: 1 - beta per read row [C] and at the end."""
    return load_row(ra + cn * C, tl.arange(0, BC), C), tl.load(ea + cn)


@device_function
def store_chunk_coefficient_grads(
    rd,
    rm,
    rg,
    ed,
    em,
    eg,
    md,
    mg,
    cn,
    C,
    U,
    g_rd,
    g_rm,
    g_rg,
    g_ed,
    g_em,
    g_eg,
    g_md,
    g_mg,
    BC: tl.constexpr,
    BU: tl.constexpr,
):
    i, u = tl.arange(0, BC), tl.arange(0, BU)
    store_row(rd + cn * C, g_rd, i, C)
    store_row(rm + cn * C, g_rm, i, C)
    store_tile(rg + cn * C * U, g_rg, i, u, C, U, U)
    store_row(eg + cn * U, g_eg, u, U)
    store_row(mg + cn * U, g_mg, u, U)
    tl.store(ed + cn, g_ed)
    tl.store(em + cn, g_em)
    tl.store(md + cn, g_md)


@device_function
def clip_scale(a_sq, b_sq, limit):
    """Per-token clip of a rank-1 gradient a^T b (docs/memory.md, section 9) from the squared
    row norms ``[U]``: s = limit / sqrt(max(|a|^2 |b|^2, limit^2)) = min(1, limit / (|a||b|)),
    where it binds, and max(|a|^2 |b|^2, limit^2) (the backward's denominator)."""
    square = a_sq * b_sq
    binds = square >= limit * limit
    floor = tl.maximum(square, limit * limit)
    return limit / tl.sqrt(floor), binds, floor


@device_function
def clip_kappa(g_dot_b, scale, binds, floor):
    """kappa = s (g . b) / (|a|^2 |b|^2) where the clip binds, else 0: the backward of
    b~ = s b is g_b = s g - kappa |a|^2 b and g_a = -kappa |b|^2 a (g the gradient of b~)."""
    return tl.where(binds, scale * g_dot_b / floor, 0.0)
