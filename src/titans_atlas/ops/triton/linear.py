"""Fused chunk loop of the linear memory f(W, x) = x W, Titans momentum (docs/gpu.md).

One program per (batch, head) walks the chunks in order with W and S ``[Dk, Dv]`` in
registers; per chunk n (docs/memory.md, eq. 4 and "Chunk end"), with base weights Wb:

    D  = k Wb - v                                   [U, Dv]  (gradient factor b; a = k)
    y  = rd * (q W) + rm * (q S) - (RG * q k^T) D   [C, Dv]
    W' = ed W + em S - k^T (eg * D),   S' = md S - k^T (mg * D)

With CLIP, D is replaced by s * D in the reads and the end state, s = min(1, c / (|k| |D|))
per token (docs/memory.md, section 9; c loaded from ``clip``).

The last chunk's start W is an output too: it is the state's ``base`` when the stream
ends inside a chunk. The backward walks the chunks in reverse from the saved chunk-start
states and recomputes D; nothing per token is stored.
Axes: N chunks, C rows per chunk, U = C + c - 1 key columns.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._tiles import (
    clip_kappa,
    clip_scale,
    load_chunk_coefficients,
    load_tile,
    store_chunk_coefficient_grads,
    store_tile,
)


@triton.jit
def linear_forward_kernel(
    q, k, v, rd, rm, rg, ed, em, eg, md, mg,  # chunk grid and coefficients
    w0, s0, base, y, w_states, s_states,  # [G, Dk, Dv] start state; outputs
    clip,  # [1] the clip threshold c (read only with CLIP)
    N, C: tl.constexpr, U: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BC: tl.constexpr, BU: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    SAVE: tl.constexpr, PREC: tl.constexpr, CLIP: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(0).to(tl.int64)
    slots = N + 1 if SAVE else 2  # every chunk-start state for the backward, or ping-pong
    i, u, dk, dv = tl.arange(0, BC), tl.arange(0, BU), tl.arange(0, BK), tl.arange(0, BV)
    w = load_tile(w0 + bh * DK * DV, dk, dv, DK, DV, DV)
    s = load_tile(s0 + bh * DK * DV, dk, dv, DK, DV, DV)
    wb = load_tile(base + bh * DK * DV, dk, dv, DK, DV, DV)
    for n in range(N):
        cn = bh * N + n
        slot = (bh * slots + (n if SAVE else n % 2)) * DK * DV
        store_tile(w_states + slot, w, dk, dv, DK, DV, DV)
        store_tile(s_states + slot, s, dk, dv, DK, DV, DV)
        qn = load_tile(q + cn * C * DK, i, dk, C, DK, DK)
        kn = load_tile(k + cn * U * DK, u, dk, U, DK, DK)
        vn = load_tile(v + cn * U * DV, u, dv, U, DV, DV)
        read_keep, read_momentum, read_grad, scalars, end_grad, momentum_grad = (
            load_chunk_coefficients(rd, rm, rg, ed, em, eg, md, mg, cn, C, U, BC, BU)
        )
        end_keep, end_momentum, momentum_carry = scalars
        delta = tl.dot(kn, wb, input_precision=PREC) - vn
        if CLIP:
            scale, _, _ = clip_scale(tl.sum(kn * kn, axis=1), tl.sum(delta * delta, axis=1),
                                     tl.load(clip))  # fmt: skip
            delta = scale[:, None] * delta
        scores = read_grad * tl.dot(qn, tl.trans(kn), input_precision=PREC)
        out = read_keep[:, None] * tl.dot(qn, w, input_precision=PREC)
        out += read_momentum[:, None] * tl.dot(qn, s, input_precision=PREC)
        out -= tl.dot(scores, delta, input_precision=PREC)
        store_tile(y + cn * C * DV, out, i, dv, C, DV, DV)
        kt = tl.trans(kn)
        w_next = end_keep * w + end_momentum * s
        w_next -= tl.dot(kt, end_grad[:, None] * delta, input_precision=PREC)
        s = momentum_carry * s - tl.dot(kt, momentum_grad[:, None] * delta, input_precision=PREC)
        w = w_next
        wb = w_next
    last = (bh * slots + (N if SAVE else N % 2)) * DK * DV
    store_tile(w_states + last, w, dk, dv, DK, DV, DV)
    store_tile(s_states + last, s, dk, dv, DK, DV, DV)


@triton.jit
def linear_backward_kernel(
    q, k, v, rd, rm, rg, ed, em, eg, md, mg, base, w_states, s_states,
    gy, gw_end, gs_end, gw_last,  # gradients of y, the end state, the last chunk's start W
    gq, gk, gv, grd, grm, grg, ged, gem, geg, gmd, gmg, gw0, gs0, gbase, clip,
    N, C: tl.constexpr, U: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BC: tl.constexpr, BU: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    PREC: tl.constexpr, CLIP: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(0).to(tl.int64)
    i, u, dk, dv = tl.arange(0, BC), tl.arange(0, BU), tl.arange(0, BK), tl.arange(0, BV)
    g_w = load_tile(gw_end + bh * DK * DV, dk, dv, DK, DV, DV)  # d loss / d (chunk-end W)
    g_s = load_tile(gs_end + bh * DK * DV, dk, dv, DK, DV, DV)
    g_last = load_tile(gw_last + bh * DK * DV, dk, dv, DK, DV, DV)
    for rev in range(N):
        n = N - 1 - rev
        cn = bh * N + n
        slot = (bh * (N + 1) + n) * DK * DV
        w = load_tile(w_states + slot, dk, dv, DK, DV, DV)
        s = load_tile(s_states + slot, dk, dv, DK, DV, DV)
        # chunk 0 may start inside a chunk of the stream: its base weights come separately
        first = tl.where(n == 0, DK, 0)  # rows to load from base: all for chunk 0, else none
        wb = tl.where(n == 0, load_tile(base + bh * DK * DV, dk, dv, first, DV, DV), w)
        qn = load_tile(q + cn * C * DK, i, dk, C, DK, DK)
        kn = load_tile(k + cn * U * DK, u, dk, U, DK, DK)
        vn = load_tile(v + cn * U * DV, u, dv, U, DV, DV)
        g_out = load_tile(gy + cn * C * DV, i, dv, C, DV, DV)
        read_keep, read_momentum, read_grad, scalars, end_grad, momentum_grad = (
            load_chunk_coefficients(rd, rm, rg, ed, em, eg, md, mg, cn, C, U, BC, BU)
        )
        end_keep, end_momentum, momentum_carry = scalars
        raw = tl.dot(kn, wb, input_precision=PREC) - vn  # D; the factor b is s D with CLIP
        delta = raw
        if CLIP:
            k_sq, d_sq = tl.sum(kn * kn, axis=1), tl.sum(raw * raw, axis=1)
            scale, binds, floor = clip_scale(k_sq, d_sq, tl.load(clip))
            delta = scale[:, None] * raw
        qk = tl.dot(qn, tl.trans(kn), input_precision=PREC)
        scores = read_grad * qk
        # reads: y = rd (q W) + rm (q S) - scores D
        g_rd = tl.sum(g_out * tl.dot(qn, w, input_precision=PREC), axis=1)
        g_rm = tl.sum(g_out * tl.dot(qn, s, input_precision=PREC), axis=1)
        g_q = read_keep[:, None] * tl.dot(g_out, tl.trans(w), input_precision=PREC)
        g_q += read_momentum[:, None] * tl.dot(g_out, tl.trans(s), input_precision=PREC)
        g_scores = -tl.dot(g_out, tl.trans(delta), input_precision=PREC)  # [C, U]
        g_rg = g_scores * qk
        g_qk = g_scores * read_grad
        g_q += tl.dot(g_qk, kn, input_precision=PREC)
        g_k = tl.dot(tl.trans(g_qk), qn, input_precision=PREC)
        # chunk end: W' = ed W + em S - k^T (eg D), S' = md S - k^T (mg D)
        k_gw = tl.dot(kn, g_w, input_precision=PREC)  # [U, Dv]
        k_gs = tl.dot(kn, g_s, input_precision=PREC)
        g_delta = -tl.dot(tl.trans(scores), g_out, input_precision=PREC)
        g_delta -= end_grad[:, None] * k_gw + momentum_grad[:, None] * k_gs
        g_ed = tl.sum(g_w * w)
        g_em = tl.sum(g_w * s)
        g_md = tl.sum(g_s * s)
        g_eg = -tl.sum(k_gw * delta, axis=1)
        g_mg = -tl.sum(k_gs * delta, axis=1)
        g_k -= tl.dot(end_grad[:, None] * delta, tl.trans(g_w), input_precision=PREC)
        g_k -= tl.dot(momentum_grad[:, None] * delta, tl.trans(g_s), input_precision=PREC)
        if CLIP:  # g_delta is the gradient of s D: through s to D and to k (clip_kappa)
            kappa = clip_kappa(tl.sum(g_delta * raw, axis=1), scale, binds, floor)
            g_delta = scale[:, None] * g_delta - (kappa * k_sq)[:, None] * raw
            g_k -= (kappa * d_sq)[:, None] * kn
        # gradient factor: D = k Wb - v
        g_k += tl.dot(g_delta, tl.trans(wb), input_precision=PREC)
        g_wb = tl.dot(tl.trans(kn), g_delta, input_precision=PREC)
        store_tile(gq + cn * C * DK, g_q, i, dk, C, DK, DK)
        store_tile(gk + cn * U * DK, g_k, u, dk, U, DK, DK)
        store_tile(gv + cn * U * DV, -g_delta, u, dv, U, DV, DV)
        store_chunk_coefficient_grads(
            grd, grm, grg, ged, gem, geg, gmd, gmg, cn, C, U,
            g_rd, g_rm, g_rg, g_ed, g_em, g_eg, g_md, g_mg, BC, BU,
        )  # fmt: skip
        g_w_start = end_keep * g_w
        g_w_start += tl.dot(tl.trans(qn), read_keep[:, None] * g_out, input_precision=PREC)
        g_s = end_momentum * g_w + momentum_carry * g_s
        g_s += tl.dot(tl.trans(qn), read_momentum[:, None] * g_out, input_precision=PREC)
        # the base weights of chunk n > 0 are its start weights; chunk 0's are separate
        g_w = g_w_start + tl.where(n > 0, g_wb, 0.0) + tl.where(n == N - 1, g_last, 0.0)
        store_tile(gbase + bh * DK * DV, g_wb, dk, dv, first, DV, DV)
    store_tile(gw0 + bh * DK * DV, g_w, dk, dv, DK, DV, DV)
    store_tile(gs0 + bh * DK * DV, g_s, dk, dv, DK, DV, DV)
