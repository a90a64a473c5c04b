"""Muon's NS5 fused into one Triton program per matrix, forward and recomputing backward.

Axes: P independent matrices (every token's momentum of every weight, head and sample in one
chunk), each ``[m, n]`` in the wide orientation (m <= n).

``newton_schulz5_triton`` has ``ops.newton_schulz5``'s signature and result. The torch form
issues three batched BLAS calls per step and the normalisation around them (26 operations
forward and 76 backward, counted on the CPU, for every chunk of a per-token Muon scan); here
each program keeps its matrix on chip for all five steps (meant to fit registers; untested on a
GPU), so a chunk's NS5 is one kernel launch forward and one backward (plus the output's
allocation). By default the backward saves nothing but the input and its norm: it re-runs the
five steps, writes the iterates X_k to a scratch buffer that lives only during that launch,
and walks them in reverse (the same algebra as ``_NewtonSchulz5.backward``; G_k and P_k are
recomputed from X_k rather than stored). With ``save_iterates`` the forward writes the X_k
instead and the backward only walks them: what the chunked Muon scan asks for under
activation checkpointing, whose recompute already re-runs this forward just before the
backward (as ``ops.newton_schulz5``; without it NS5 ran forward three times per chunk).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from ..newton_schulz import NS5_COEFFICIENTS, _check_matrix, compute_dtype, on_wide_matrices
from ._tiles import (
    PRECISIONS,
    block,
    device_function,
    fitting,
    interpreting,
    load_tile,
    store_tile,
)

# Untuned (no GPU has run this kernel): one matrix per program, held whole. A 64 x 256 fp32
# tile is 64 KB over 8 warps' registers, and the backward keeps several such tiles live, so
# it may already spill; larger tiles (float64 at 64 x 256 included) are refused.
NUM_WARPS = 8
MAX_TILE_BYTES = 64 * 256 * 4


@device_function
def _gram_poly(x, b, c, PREC: tl.constexpr):
    """G = X X^T and P = b G + c G^2 of one iterate X ``[m, n]``."""
    gram = tl.dot(x, tl.trans(x), input_precision=PREC)
    return gram, b * gram + c * tl.dot(gram, gram, input_precision=PREC)


@device_function
def _constants(dtype, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr, EPS: tl.constexpr):
    """(a, b, c, eps) as scalars of the compute dtype, made in the kernel: no tensor argument
    (nothing to copy to the device, nothing for a CUDA graph to capture), and no fp32
    rounding of a float64 run."""
    return (tl.full([], A, dtype), tl.full([], B, dtype), tl.full([], C, dtype),
            tl.full([], EPS, dtype))  # fmt: skip


@triton.jit
def ns5_forward_kernel(
    x, out, norm_out, iterates, M, N,
    STEPS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, PREC: tl.constexpr,
    A: tl.constexpr, B: tl.constexpr, C: tl.constexpr, EPS: tl.constexpr, SAVE: tl.constexpr,
):  # fmt: skip
    """Program p: out[p] = NS5(x[p] / (||x[p]|| + eps)); norm_out[p] = ||x[p]||; with SAVE,
    iterates[p, k] = X_k (k < STEPS) for the backward."""
    p = tl.program_id(0).to(tl.int64)  # p * STEPS * M * N passes 2^31 at ~26k matrices
    rows, cols = tl.arange(0, BM), tl.arange(0, BN)
    a, b, c, eps = _constants(x.dtype.element_ty, A, B, C, EPS)
    matrix = load_tile(x + p * M * N, rows, cols, M, N, N)
    norm = tl.sqrt(tl.sum(tl.sum(matrix * matrix, axis=1), axis=0))
    matrix = matrix / (norm + eps)
    for k in tl.static_range(STEPS):
        if SAVE:
            store_tile(iterates + (p * STEPS + k) * M * N, matrix, rows, cols, M, N, N)
        _gram, poly = _gram_poly(matrix, b, c, PREC)
        matrix = a * matrix + tl.dot(poly, matrix, input_precision=PREC)
    store_tile(out + p * M * N, matrix, rows, cols, M, N, N)
    tl.store(norm_out + p, norm)


@triton.jit
def ns5_backward_kernel(
    x, norm_in, grad_out, grad_in, scratch, M, N,
    STEPS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, PREC: tl.constexpr,
    A: tl.constexpr, B: tl.constexpr, C: tl.constexpr, EPS: tl.constexpr,
    RECOMPUTE: tl.constexpr,
):  # fmt: skip
    """Program p: grad_in[p] = d NS5(x[p]) / d x[p] applied to grad_out[p]. Step Y = a X + P X
    with P = b G + c G^2, G = X X^T (G, P symmetric), Q = dY X^T + X dY^T:
    dX = a dY + P dY + (b Q + c (Q G + G Q)) X. ``scratch[p, k]`` holds X_k: written here
    first with RECOMPUTE, else by the forward (``save_iterates``)."""
    p = tl.program_id(0).to(tl.int64)  # p * STEPS * M * N passes 2^31 at ~26k matrices
    rows, cols = tl.arange(0, BM), tl.arange(0, BN)
    a, b, c, eps = _constants(x.dtype.element_ty, A, B, C, EPS)
    norm = tl.load(norm_in + p)
    saved = scratch + p * STEPS * M * N
    if RECOMPUTE:
        iterate = load_tile(x + p * M * N, rows, cols, M, N, N) / (norm + eps)
        for k in tl.static_range(STEPS):
            store_tile(saved + k * M * N, iterate, rows, cols, M, N, N)
            _gram, poly = _gram_poly(iterate, b, c, PREC)
            iterate = a * iterate + tl.dot(poly, iterate, input_precision=PREC)
        tl.debug_barrier()  # the reverse walk reads iterates other threads wrote
    grad = load_tile(grad_out + p * M * N, rows, cols, M, N, N)
    for k in tl.static_range(STEPS):
        iterate = load_tile(saved + (STEPS - 1 - k) * M * N, rows, cols, M, N, N)
        gram, poly = _gram_poly(iterate, b, c, PREC)
        d_poly = tl.dot(grad, tl.trans(iterate), input_precision=PREC)
        sym = d_poly + tl.trans(d_poly)
        mixed = tl.dot(sym, gram, input_precision=PREC)
        d_gram = c * (mixed + tl.trans(mixed)) + b * sym
        grad = a * grad + tl.dot(poly, grad, input_precision=PREC)
        grad += tl.dot(d_gram, iterate, input_precision=PREC)
    # X_0 = x s, s = 1 / (||x|| + eps): dx = s dX_0 - s^2 <dX_0, x> / ||x|| x (0 at x = 0)
    scale = 1.0 / (norm + eps)
    source = load_tile(x + p * M * N, rows, cols, M, N, N)  # reloaded: not live in the loops
    inner = tl.sum(tl.sum(grad * source, axis=1), axis=0)
    safe_norm = tl.where(norm > 0, norm, 1.0)
    correction = tl.where(norm > 0, scale * scale * inner / safe_norm, 0.0)
    store_tile(grad_in + p * M * N, scale * grad - correction * source, rows, cols, M, N, N)


def _launch_config(x: torch.Tensor, steps: int, eps: float, precision: str) -> dict:
    m, n = x.shape[-2:]
    blocks = dict(BM=block(m), BN=block(n))
    size = blocks["BM"] * blocks["BN"] * x.element_size()
    if size > MAX_TILE_BYTES:
        raise ValueError(
            f"x: newton_schulz5_triton holds one matrix per program, at most {MAX_TILE_BYTES} "
            f"bytes padded; got {m} x {n} in {x.dtype} (use ops.newton_schulz5)"
        )
    prec = "ieee" if x.dtype == torch.float64 else precision  # TF32 is a float32 mode
    a, b, c = NS5_COEFFICIENTS
    constants = dict(A=a, B=b, C=c, EPS=eps)
    return dict(M=m, N=n, STEPS=steps, PREC=prec, num_warps=NUM_WARPS, **blocks, **constants)


class _NewtonSchulz5Triton(torch.autograd.Function):
    """NS5 of contiguous ``x`` ``[P, m, n]`` (m <= n, compute dtype). Saves x and its norms,
    and with ``save_iterates`` the iterates ``[P, steps, m, n]``."""

    @staticmethod
    def forward(
        ctx, x: torch.Tensor, steps: int, eps: float, precision: str, save_iterates: bool
    ) -> torch.Tensor:
        config = _launch_config(x, steps, eps, precision)
        out, norm = torch.empty_like(x), x.new_empty(x.shape[0])
        # without SAVE the kernel never touches its iterates argument: out stands in
        iterates = x.new_empty(x.shape[0], steps, *x.shape[1:]) if save_iterates else out
        if x.shape[0]:
            with fitting("the NS5 forward kernel", f"{x.shape[1]} x {x.shape[2]}"):
                ns5_forward_kernel[(x.shape[0],)](
                    x, out, norm, iterates, **config, SAVE=save_iterates
                )
        ctx.save_for_backward(x, norm, *([iterates] if save_iterates else []))
        ctx.config = config
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        x, norm, *saved = ctx.saved_tensors
        grad, d_x = grad.contiguous(), torch.empty_like(x)
        scratch = saved[0] if saved else x.new_empty(x.shape[0], ctx.config["STEPS"], *x.shape[1:])
        if x.shape[0]:
            with fitting("the NS5 backward kernel", f"{x.shape[1]} x {x.shape[2]}"):
                ns5_backward_kernel[(x.shape[0],)](
                    x, norm, grad, d_x, scratch, **ctx.config, RECOMPUTE=not saved
                )
        return d_x, None, None, None, None


def newton_schulz5_triton(
    x: torch.Tensor,
    steps: int = 5,
    eps: float = 1e-7,
    *,
    save_iterates: bool = False,
    precision: str = "ieee",
) -> torch.Tensor:
    """``ops.newton_schulz5`` in one Triton launch forward and one backward (CUDA, or the CPU
    interpreter). The backward re-runs the iterates inside its launch, unless
    ``save_iterates``: then the forward keeps them (5 x m x n per matrix) and the backward only
    walks them back, as under activation checkpointing. ``precision``: tl.dot's input
    precision for float32 ("ieee", "tf32x3", "tf32"); float64 is always exact."""
    _check_matrix(x)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if x.device.type != "cuda" and not interpreting():
        raise ValueError(
            f"newton_schulz5_triton needs CUDA tensors (got device {x.device.type!r}); set "
            "TRITON_INTERPRET=1 before triton is first imported to run it on the CPU"
        )

    keep = save_iterates and torch.is_grad_enabled()  # no backward, nothing to keep

    def fused(flat: torch.Tensor) -> torch.Tensor:  # contiguous in the compute dtype for the kernel
        ready = flat.to(compute_dtype(x)).contiguous()
        return _NewtonSchulz5Triton.apply(ready, steps, eps, precision, keep).to(x.dtype)

    return on_wide_matrices(fused, x)
