"""Autograd functions around the fused kernels: one launch forward, one launch backward.

Axes: G = B * H independent memories, N chunks, C rows per chunk, U = C + c - 1 key
columns, Dk/Dv key/value width, Dh hidden width. Inputs are contiguous chunk grids
(``q`` ``[G, N, C, Dk]``, ``k`` ``[G, N, U, Dk]``, ``v`` ``[G, N, U, Dv]``) and the per-chunk
coefficients of ``coefficients.momentum_coefficients`` flattened the same way; states are
``[G, d_in, d_out]``. Kernel argument names abbreviate the ``MomentumCoefficients`` fields:
rd read_keep, rm read_momentum, rg read_grad, ed end_keep, em end_momentum, eg end_grad,
md momentum_carry, mg momentum_grad. The forward keeps the start state of every chunk (only when a
gradient is wanted); the backward recomputes everything else per chunk from them.
"""

from __future__ import annotations

import torch
import triton
from torch.autograd.function import once_differentiable

from ._tiles import GELU, SILU, block, fitting
from .linear import linear_backward_kernel, linear_forward_kernel
from .mlp import mlp_forward_kernel
from .mlp_backward import mlp_backward_kernel

ACTIVATION_CODES = {"gelu": GELU, "silu": SILU}
# Launch configuration, untuned (one H200 run so far; docs/gpu.md): hidden-width tile of the
# MLP kernels, warps per program, and no software pipelining (a chunk step holds dozens of
# dots, and at real widths the MLP backward already exceeds sm_90's shared memory).
# benchmarks/gpu.py sweeps them (--hidden-tile, --num-warps, --num-stages).
HIDDEN_TILE = 64
NUM_WARPS = 8
NUM_STAGES = 1


def _launch() -> dict:
    return dict(num_warps=NUM_WARPS, num_stages=NUM_STAGES)


def _widths(q: torch.Tensor, v: torch.Tensor, hidden: int | None = None) -> str:
    """The widths an error message names: key, value and (MLP) hidden."""
    return f"Dk={q.shape[-1]}, Dv={v.shape[-1]}" + (f", Dh={hidden}" if hidden else "")


def _zeros_if_none(grad: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if grad is None else grad.contiguous()


def _coefficient_grads(q: torch.Tensor, k: torch.Tensor) -> list[torch.Tensor]:
    """Empty gradients of (rd, rm, rg, ed, em, eg, md, mg) for the grid of q and k."""
    g, n, c = q.shape[:3]
    u = k.shape[2]
    shapes = [(g, n, c), (g, n, c), (g, n, c, u), (g, n), (g, n), (g, n, u), (g, n), (g, n, u)]
    return [q.new_empty(shape) for shape in shapes]


def _blocks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> dict:
    """Sizes and power-of-two block widths of the chunk grid (constexpr kernel arguments)."""
    _, _, c, dk = q.shape
    u, dv = k.shape[2], v.shape[-1]
    sizes = dict(C=c, U=u, DK=dk, DV=dv)
    return sizes | dict(BC=block(c), BU=block(u), BK=block(dk), BV=block(dv))


def clip_tensor(clip: float | None, like: torch.Tensor) -> torch.Tensor:
    """The clip threshold as a one-element tensor of the compute dtype (a float argument
    would be an fp32 scalar in a compiled kernel); any value when there is no clip."""
    return torch.full((1,), 1.0 if clip is None else clip, dtype=like.dtype, device=like.device)


class LinearScan(torch.autograd.Function):
    """Linear memory: (q, k, v, 8 coefficients, W0, S0, base) -> (y, W_end, S_end, W_last),
    W_last the start weights of the last chunk (the next call's base inside a chunk);
    ``options`` = (input precision, save for backward, clip threshold or None)."""

    @staticmethod
    def forward(ctx, options, q, k, v, rd, rm, rg, ed, em, eg, md, mg, w0, s0, base):
        precision, save, clip = options
        limit = clip_tensor(clip, q)
        groups, chunks = q.shape[:2]
        slots = chunks + 1 if save else 2
        w_states = w0.new_empty(groups, slots, *w0.shape[1:])
        s_states = torch.empty_like(w_states)
        y = q.new_empty(groups, chunks, q.shape[2], v.shape[-1])
        sizes = _blocks(q, k, v)
        with fitting("the linear forward kernel", _widths(q, v)):
            linear_forward_kernel[(groups,)](
                q, k, v, rd, rm, rg, ed, em, eg, md, mg, w0, s0, base, y, w_states, s_states, limit,
                chunks, **sizes, SAVE=save, PREC=precision, CLIP=clip is not None, **_launch(),
            )  # fmt: skip
        end, last = (chunks, chunks - 1) if save else (chunks % 2, (chunks - 1) % 2)
        if save:
            ctx.save_for_backward(q, k, v, rd, rm, rg, ed, em, eg, md, mg, base, w_states, s_states)
            ctx.precision, ctx.clip = precision, clip
        return y, w_states[:, end].clone(), s_states[:, end].clone(), w_states[:, last].clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, g_y, g_w_end, g_s_end, g_w_last):
        q, k, v, rd, rm, rg, ed, em, eg, md, mg, base, w_states, s_states = ctx.saved_tensors
        groups, chunks = q.shape[:2]
        g_y = _zeros_if_none(g_y, q.new_empty(*q.shape[:3], v.shape[-1]))
        g_w_end, g_s_end, g_w_last = (_zeros_if_none(g, base) for g in (g_w_end, g_s_end, g_w_last))
        g_q, g_k, g_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        g_coef = _coefficient_grads(q, k)
        g_w0, g_s0, g_base = (torch.empty_like(base) for _ in range(3))
        with fitting("the linear backward kernel", _widths(q, v)):
            linear_backward_kernel[(groups,)](
                q, k, v, rd, rm, rg, ed, em, eg, md, mg, base, w_states, s_states,
                g_y, g_w_end, g_s_end, g_w_last, g_q, g_k, g_v, *g_coef, g_w0, g_s0, g_base,
                clip_tensor(ctx.clip, q), chunks, **_blocks(q, k, v), PREC=ctx.precision,
                CLIP=ctx.clip is not None, **_launch(),
            )  # fmt: skip
        return None, g_q, g_k, g_v, *g_coef, g_w0, g_s0, g_base


class MLPScan(torch.autograd.Function):
    """2-layer MLP memory: (q, k, v, 8 coefficients, W1, S1, W2, S2, B1, B2, RA, EA, A1, A2)
    -> (y, W1_end, S1_end, W2_end, S2_end, W1_last, W2_last); RA ``[G, N, C]`` and EA
    ``[G, N]`` are the decay target's coefficients (``read_anchor``, ``end_anchor``) and
    A1, A2 the target, all four None without one; ``options`` = (input precision, activation
    code, residual, save for backward, clip threshold or None)."""

    @staticmethod
    def forward(
        ctx, options, q, k, v, rd, rm, rg, ed, em, eg, md, mg, w1, s1, w2, s2, b1, b2, *target
    ):
        precision, act, residual, save, clip = options
        anchor = target[0] is not None
        target = target if anchor else (rd, ed, b1, b2)  # stand-ins (saved anyway), never read
        groups, chunks = q.shape[:2]
        slots = chunks + 1 if save else 2
        states = [x.new_empty(groups, slots, *x.shape[1:]) for x in (w1, s1, w2, s2)]
        y = q.new_empty(groups, chunks, q.shape[2], v.shape[-1])
        sizes = _mlp_blocks(q, k, v, w1)
        with fitting("the MLP forward kernel", _widths(q, v, w1.shape[-1])):
            mlp_forward_kernel[(groups,)](
                q, k, v, rd, rm, rg, ed, em, eg, md, mg, w1, s1, w2, s2, b1, b2, y, *states,
                clip_tensor(clip, q), *target, chunks, **sizes, ACT=act, RESIDUAL=residual,
                SAVE=save, PREC=precision, CLIP=clip is not None, ANCHOR=anchor, **_launch(),
            )  # fmt: skip
        end, last = (chunks, chunks - 1) if save else (chunks % 2, (chunks - 1) % 2)
        if save:
            saved = (q, k, v, rd, rm, rg, ed, em, eg, md, mg, b1, b2, *target, *states)
            ctx.save_for_backward(*saved)
            ctx.options, ctx.anchor = options, anchor
        ends = [x[:, end].clone() for x in states]
        return y, *ends, states[0][:, last].clone(), states[2][:, last].clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, g_y, g_w1, g_s1, g_w2, g_s2, g_w1_last, g_w2_last):
        q, k, v, rd, rm, rg, ed, em, eg, md, mg, b1, b2, *rest = ctx.saved_tensors
        target, states = rest[:4], rest[4:]
        precision, act, residual, _, clip = ctx.options
        groups, chunks = q.shape[:2]
        g_y = _zeros_if_none(g_y, q.new_empty(*q.shape[:3], v.shape[-1]))
        incoming = [
            _zeros_if_none(g, like) for g, like in zip(
                (g_w1, g_s1, g_w2, g_s2, g_w1_last, g_w2_last), (b1, b1, b2, b2, b1, b2)
            )
        ]  # fmt: skip
        g_q, g_k, g_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        g_coef = _coefficient_grads(q, k)
        g_slots = [x.new_empty(groups, 2, *x.shape[2:]) for x in states]
        g_b1, g_b2 = torch.empty_like(b1), torch.empty_like(b2)
        sizes = _mlp_blocks(q, k, v, b1)
        hidden_padded = triton.cdiv(sizes["DH"], sizes["BT"]) * sizes["BT"]
        scratch = [q.new_empty(groups, sizes["BU"], hidden_padded) for _ in range(2)]
        g_target = list(target)  # stand-in pointers without a target, never written
        if ctx.anchor:  # coefficients written per chunk; A1, A2 summed over the chunks
            g_target = [torch.empty_like(x) for x in target[:2]]
            g_target += [torch.zeros_like(x) for x in target[2:]]
        with fitting("the MLP backward kernel", _widths(q, v, sizes["DH"])):
            mlp_backward_kernel[(groups,)](
                q, k, v, rd, rm, rg, ed, em, eg, md, mg, b1, b2, *states, g_y, *incoming,
                g_q, g_k, g_v, *g_coef, *g_slots, g_b1, g_b2, *scratch, clip_tensor(clip, q),
                *target, *g_target, chunks, **sizes, ACT=act, RESIDUAL=residual, PREC=precision,
                CLIP=clip is not None, ANCHOR=ctx.anchor, **_launch(),
            )  # fmt: skip
        g_w1, g_s1, g_w2, g_s2 = (x[:, 0] for x in g_slots)  # chunk 0's start-state gradient
        g_target = g_target if ctx.anchor else [None] * 4
        return None, g_q, g_k, g_v, *g_coef, g_w1, g_s1, g_w2, g_s2, g_b1, g_b2, *g_target


def _mlp_blocks(q, k, v, w1) -> dict:
    hidden = w1.shape[-1]
    return _blocks(q, k, v) | dict(DH=hidden, BT=min(HIDDEN_TILE, block(hidden)))
