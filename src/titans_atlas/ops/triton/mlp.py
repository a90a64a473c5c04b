"""Fused chunk loop of the 2-layer MLP memory f(W, x) = act(x W1) W2 (+ x), Titans momentum.

One program per (batch, head) walks the chunks. The state (W1, S1 ``[Dk, Dh]``, W2, S2
``[Dh, Dv]``) is too large for registers at real widths, so it lives in global memory (L2
resident) in per-chunk slots and is streamed through in hidden-width tiles of BT columns.
Per chunk (docs/memory.md, eq. 4), with base weights B1, B2 and act' / act'' its derivatives:

    Z = k B1, H = act(Z), D2 = H B2 - v (+ k)           factors of W2: (H, D2)
    P = D2 B2^T, D1 = P * act'(Z)                       factors of W1: (k, D1)
    Zq = rd (q W1) + rm (q S1) - (RG * q k^T) D1, Hq = act(Zq)
    y  = rd (Hq W2) + rm (Hq S2) - (RG * Hq H^T) D2 (+ q)
    W' = ed W + em S - a^T (eg * b),  S' = md S - a^T (mg * b)   for (a, b) of each weight

With ANCHOR (a decay target A, docs/memory.md section 10) every weight gains (1 - beta) A:
Zq gains ra (q A1), y gains ra (Hq A2) and W' gains ea A (ra, ea: ``read_anchor``,
``end_anchor``); the factors are unchanged (the base weights already hold A's share).

D2 needs every hidden tile (pass 1); then one pass per tile does the rest. With CLIP every
token's factors b are scaled, weight by weight, s2 = min(1, c / (|H| |D2|)) on D2 and
s1 = min(1, c / (|k| |D1|)) on D1 (docs/memory.md, section 9): |H|^2 comes with pass 1 and
|D1|^2 takes one more pass over the tiles (``hidden_error_norm``); D1 itself is still computed
from the unclipped D2 (it is the backpropagated error, not W2's update). The backward is in
mlp_backward.py. Axes: C rows, U = C + c - 1 key columns, T hidden tiles of width BT.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._tiles import (
    activation,
    clip_scale,
    device_function,
    load_anchor_coefficients,
    load_chunk_coefficients,
    load_tile,
    store_tile,
)


@device_function
def base_tiles(b1, b2, w1, w2, n, hid, dk, dv, DK, DH, DV):
    """Tiles of the base weights B1 ``[Dk, BT]`` and B2 ``[BT, Dv]`` of chunk n: the separate
    base for chunk 0 (a call may start inside a stream's chunk), the start weights after."""
    first_k, first_h = tl.where(n == 0, DK, 0), tl.where(n == 0, DH, 0)
    b1_t = tl.where(
        n == 0, load_tile(b1, dk, hid, first_k, DH, DH), load_tile(w1, dk, hid, DK, DH, DH)
    )
    b2_t = tl.where(
        n == 0, load_tile(b2, hid, dv, first_h, DV, DV), load_tile(w2, hid, dv, DH, DV, DV)
    )
    return b1_t, b2_t


@device_function
def factor_tile(kn, delta2, b1_t, b2_t, ACT: tl.constexpr, PREC: tl.constexpr):
    """Z, H, act'(Z), act''(Z), P and D1 of one hidden tile ``[U, BT]``."""
    z = tl.dot(kn, b1_t, input_precision=PREC)
    h, dh, ddh = activation(z, ACT)
    p = tl.dot(delta2, tl.trans(b2_t), input_precision=PREC)
    return z, h, dh, ddh, p, p * dh


@device_function
def read_tile(qn, scores1, d1, w1_t, s1_t, a1_t, rd, rm, ra, ACT: tl.constexpr,
              PREC: tl.constexpr, ANCHOR: tl.constexpr):  # fmt: skip
    """Layer 1 read of one hidden tile: q W1, q S1, q A1 (0 without ANCHOR), Hq = act(Zq),
    act'(Zq) ``[C, BT]``."""
    qw = tl.dot(qn, w1_t, input_precision=PREC)
    qs = tl.dot(qn, s1_t, input_precision=PREC)
    zq = rd[:, None] * qw + rm[:, None] * qs - tl.dot(scores1, d1, input_precision=PREC)
    qa = tl.zeros_like(qw)
    if ANCHOR:
        qa = tl.dot(qn, a1_t, input_precision=PREC)
        zq += ra[:, None] * qa
    hq, dhq, _ = activation(zq, ACT)
    return qw, qs, qa, hq, dhq


@device_function
def anchor_tiles(a1, a2, hid, dk, dv, DK, DH, DV, w1_t, w2_t, ANCHOR: tl.constexpr):
    """Tiles of the decay target A1 ``[Dk, BT]`` and A2 ``[BT, Dv]``; without ANCHOR the
    given weight tiles stand in (and are never used as A)."""
    a1_t, a2_t = w1_t, w2_t
    if ANCHOR:
        a1_t = load_tile(a1, dk, hid, DK, DH, DH)
        a2_t = load_tile(a2, hid, dv, DH, DV, DV)
    return a1_t, a2_t


@device_function
def factor_delta(kn, vn, b1, b2, w1, w2, n, dk, dv, DK, DH, DV, NT,
                 BU: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
                 ACT: tl.constexpr, RESIDUAL: tl.constexpr, PREC: tl.constexpr):  # fmt: skip
    """D2 = f(B, k) - v ``[U, Dv]``: the output error at the base weights (all hidden tiles),
    and |H|^2 per key column ``[U]``."""
    out = tl.zeros([BU, BV], dtype=kn.dtype)
    h_sq = tl.zeros([BU], dtype=kn.dtype)
    for t in range(NT):
        hid = t * BT + tl.arange(0, BT)
        b1_t, b2_t = base_tiles(b1, b2, w1, w2, n, hid, dk, dv, DK, DH, DV)
        h, _, _ = activation(tl.dot(kn, b1_t, input_precision=PREC), ACT)
        out += tl.dot(h, b2_t, input_precision=PREC)
        h_sq += tl.sum(h * h, axis=1)
    if RESIDUAL:
        out += kn
    return out - vn, h_sq


@device_function
def hidden_error_norm(kn, delta2, b1, b2, w1, w2, n, dk, dv, DK, DH, DV, NT,
                      BU: tl.constexpr, BT: tl.constexpr, ACT: tl.constexpr,
                      PREC: tl.constexpr):  # fmt: skip
    """|D1|^2 per key column ``[U]`` (all hidden tiles): the clip of W1's factors needs it
    before any tile uses D1."""
    d1_sq = tl.zeros([BU], dtype=kn.dtype)
    for t in range(NT):
        hid = t * BT + tl.arange(0, BT)
        b1_t, b2_t = base_tiles(b1, b2, w1, w2, n, hid, dk, dv, DK, DH, DV)
        _, _, _, _, _, d1 = factor_tile(kn, delta2, b1_t, b2_t, ACT, PREC)
        d1_sq += tl.sum(d1 * d1, axis=1)
    return d1_sq


@device_function
def clip_scales(kn, delta2, h_sq, b1, b2, w1, w2, clip, n, dk, dv, DK, DH, DV, NT,
                BU: tl.constexpr, BT: tl.constexpr, ACT: tl.constexpr,
                PREC: tl.constexpr):  # fmt: skip
    """The clip of both weights' factors, flat: s1, binds1, floor1 for (k, D1), s2, binds2,
    floor2 for (H, D2) (``clip_scale``), then |k|^2, |D1|^2, |D2|^2 (the backward's terms)."""
    limit = tl.load(clip)
    d1_sq = hidden_error_norm(kn, delta2, b1, b2, w1, w2, n, dk, dv, DK, DH, DV, NT,
                              BU, BT, ACT, PREC)  # fmt: skip
    k_sq, d2_sq = tl.sum(kn * kn, axis=1), tl.sum(delta2 * delta2, axis=1)
    scale1, binds1, floor1 = clip_scale(k_sq, d1_sq, limit)
    scale2, binds2, floor2 = clip_scale(h_sq, d2_sq, limit)
    return scale1, binds1, floor1, scale2, binds2, floor2, k_sq, d1_sq, d2_sq


@device_function
def copy_state(src, dst, rows, cols, NT, BR: tl.constexpr, BCOL: tl.constexpr,
               TILE_ROWS: tl.constexpr):  # fmt: skip
    """Copy a ``[rows, cols]`` matrix tile by tile along its hidden axis (rows if TILE_ROWS)."""
    for t in range(NT):
        if TILE_ROWS:
            r, c = t * BR + tl.arange(0, BR), tl.arange(0, BCOL)
        else:
            r, c = tl.arange(0, BR), t * BCOL + tl.arange(0, BCOL)
        store_tile(dst, load_tile(src, r, c, rows, cols, cols), r, c, rows, cols, cols)


@triton.jit
def mlp_forward_kernel(
    q, k, v, rd, rm, rg, ed, em, eg, md, mg,  # chunk grid and coefficients
    w1_0, s1_0, w2_0, s2_0, b1, b2,  # start state and chunk 0's base weights [G, ...]
    y, w1_st, s1_st, w2_st, s2_st,  # outputs: reads, state slots [G, slots, ...]
    clip,  # [1] the clip threshold c (read only with CLIP)
    ra, ea, a1, a2,  # decay target: its coefficients [G, N, C], [G, N] and A1, A2 [G, ...]
    N, C: tl.constexpr, U: tl.constexpr, DK: tl.constexpr, DH: tl.constexpr, DV: tl.constexpr,
    BC: tl.constexpr, BU: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
    ACT: tl.constexpr, RESIDUAL: tl.constexpr, SAVE: tl.constexpr, PREC: tl.constexpr,
    CLIP: tl.constexpr, ANCHOR: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(0).to(tl.int64)
    slots = N + 1 if SAVE else 2  # every chunk-start state for the backward, or ping-pong
    nt = tl.cdiv(DH, BT)
    i, u, dk, dv = tl.arange(0, BC), tl.arange(0, BU), tl.arange(0, BK), tl.arange(0, BV)
    sz1, sz2 = DK * DH, DH * DV
    b1, b2, a1, a2 = b1 + bh * sz1, b2 + bh * sz2, a1 + bh * sz1, a2 + bh * sz2
    copy_state(w1_0 + bh * sz1, w1_st + bh * slots * sz1, DK, DH, nt, BK, BT, False)
    copy_state(s1_0 + bh * sz1, s1_st + bh * slots * sz1, DK, DH, nt, BK, BT, False)
    copy_state(w2_0 + bh * sz2, w2_st + bh * slots * sz2, DH, DV, nt, BT, BV, True)
    copy_state(s2_0 + bh * sz2, s2_st + bh * slots * sz2, DH, DV, nt, BT, BV, True)
    tl.debug_barrier()  # the slots are read back by other threads of this program
    for n in range(N):
        cn = bh * N + n
        cur = bh * slots + (n if SAVE else n % 2)
        nxt = bh * slots + (n + 1 if SAVE else (n + 1) % 2)
        w1, s1, w2, s2 = w1_st + cur * sz1, s1_st + cur * sz1, w2_st + cur * sz2, s2_st + cur * sz2
        qn = load_tile(q + cn * C * DK, i, dk, C, DK, DK)
        kn = load_tile(k + cn * U * DK, u, dk, U, DK, DK)
        vn = load_tile(v + cn * U * DV, u, dv, U, DV, DV)
        read_keep, read_momentum, read_grad, scalars, end_grad, momentum_grad = (
            load_chunk_coefficients(rd, rm, rg, ed, em, eg, md, mg, cn, C, U, BC, BU)
        )
        end_keep, end_momentum, momentum_carry = scalars
        read_anchor, end_anchor = read_keep, end_keep  # stand-ins, unused without ANCHOR
        if ANCHOR:
            read_anchor, end_anchor = load_anchor_coefficients(ra, ea, cn, C, BC)
        scores1 = read_grad * tl.dot(qn, tl.trans(kn), input_precision=PREC)
        delta2, h_sq = factor_delta(kn, vn, b1, b2, w1, w2, n, dk, dv, DK, DH, DV, nt,
                                    BU, BT, BV, ACT, RESIDUAL, PREC)  # fmt: skip
        scale1 = tl.full([BU], 1.0, dtype=qn.dtype)  # the clip's s1, s2 (1: no clip)
        scale2 = tl.full([BU], 1.0, dtype=qn.dtype)
        if CLIP:
            # the unused outputs get names of their own: a "_" assigned here and again in the
            # loop below would be a loop-carried variable whose shape changes, which the
            # Triton compiler rejects (the CPU interpreter does not; seen on the H200)
            scale1, _b1, _f1, scale2, _b2, _f2, _k, _d1, _d2 = clip_scales(
                kn, delta2, h_sq, b1, b2, w1, w2, clip, n, dk, dv, DK, DH, DV, nt,
                BU, BT, ACT, PREC,
            )  # fmt: skip
        delta2c = scale2[:, None] * delta2  # W2's factor b
        out = tl.zeros([BC, BV], dtype=qn.dtype)
        hh = tl.zeros([BC, BU], dtype=qn.dtype)  # Hq H^T, the layer-2 scores
        for t in range(nt):
            hid = t * BT + tl.arange(0, BT)
            b1_t, b2_t = base_tiles(b1, b2, w1, w2, n, hid, dk, dv, DK, DH, DV)
            _, h, _, _, _, d1 = factor_tile(kn, delta2, b1_t, b2_t, ACT, PREC)
            d1 = scale1[:, None] * d1  # W1's factor b
            w1_t, s1_t = load_tile(w1, dk, hid, DK, DH, DH), load_tile(s1, dk, hid, DK, DH, DH)
            w2_t, s2_t = load_tile(w2, hid, dv, DH, DV, DV), load_tile(s2, hid, dv, DH, DV, DV)
            a1_t, a2_t = anchor_tiles(a1, a2, hid, dk, dv, DK, DH, DV, w1_t, w2_t, ANCHOR)
            _, _, _, hq, _ = read_tile(qn, scores1, d1, w1_t, s1_t, a1_t, read_keep,
                                       read_momentum, read_anchor, ACT, PREC, ANCHOR)  # fmt: skip
            out += read_keep[:, None] * tl.dot(hq, w2_t, input_precision=PREC)
            out += read_momentum[:, None] * tl.dot(hq, s2_t, input_precision=PREC)
            hh += tl.dot(hq, tl.trans(h), input_precision=PREC)
            kt, ht = tl.trans(kn), tl.trans(h)
            w1_n = end_keep * w1_t + end_momentum * s1_t
            w1_n -= tl.dot(kt, end_grad[:, None] * d1, input_precision=PREC)
            s1_n = momentum_carry * s1_t
            s1_n -= tl.dot(kt, momentum_grad[:, None] * d1, input_precision=PREC)
            w2_n = end_keep * w2_t + end_momentum * s2_t
            w2_n -= tl.dot(ht, end_grad[:, None] * delta2c, input_precision=PREC)
            s2_n = momentum_carry * s2_t
            s2_n -= tl.dot(ht, momentum_grad[:, None] * delta2c, input_precision=PREC)
            if ANCHOR:  # the read and the chunk end gain (1 - beta) A (docs/memory.md, 10)
                out += read_anchor[:, None] * tl.dot(hq, a2_t, input_precision=PREC)
                w1_n += end_anchor * a1_t
                w2_n += end_anchor * a2_t
            store_tile(w1_st + nxt * sz1, w1_n, dk, hid, DK, DH, DH)
            store_tile(s1_st + nxt * sz1, s1_n, dk, hid, DK, DH, DH)
            store_tile(w2_st + nxt * sz2, w2_n, hid, dv, DH, DV, DV)
            store_tile(s2_st + nxt * sz2, s2_n, hid, dv, DH, DV, DV)
        out -= tl.dot(read_grad * hh, delta2c, input_precision=PREC)
        if RESIDUAL:
            out += qn
        store_tile(y + cn * C * DV, out, i, dv, C, DV, DV)
        tl.debug_barrier()  # chunk n + 1 reads the slot this chunk wrote
