"""Passes 1, 2 and 4 of the fused MLP backward (mlp_backward.py; notation: mlp.py), each a
loop over the hidden tiles that returns its sums. They live apart to keep the kernel's file
short; pass 3 stays inline in the kernel because it updates a dozen of its accumulators.
"""

from __future__ import annotations

import triton.language as tl

from ._tiles import activation, device_function, load_tile, store_tile
from .mlp import anchor_tiles, base_tiles, factor_tile, read_tile


@device_function
def output_error(kn, vn, b1, b2, w1, w2, gw2, gs2, n, dk, dv, DK, DH, DV, NT,
                 BU: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
                 ACT: tl.constexpr, RESIDUAL: tl.constexpr, PREC: tl.constexpr):  # fmt: skip
    """Pass 1: D2 ``[U, Dv]``, H gW2', H gS2' for the incoming end-state gradients, |H|^2."""
    out = tl.zeros([BU, BV], dtype=kn.dtype)
    h_gw2 = tl.zeros([BU, BV], dtype=kn.dtype)
    h_gs2 = tl.zeros([BU, BV], dtype=kn.dtype)
    h_sq = tl.zeros([BU], dtype=kn.dtype)
    for t in range(NT):
        hid = t * BT + tl.arange(0, BT)
        b1_t, b2_t = base_tiles(b1, b2, w1, w2, n, hid, dk, dv, DK, DH, DV)
        h, _, _ = activation(tl.dot(kn, b1_t, input_precision=PREC), ACT)
        out += tl.dot(h, b2_t, input_precision=PREC)
        h_gw2 += tl.dot(h, load_tile(gw2, hid, dv, DH, DV, DV), input_precision=PREC)
        h_gs2 += tl.dot(h, load_tile(gs2, hid, dv, DH, DV, DV), input_precision=PREC)
        h_sq += tl.sum(h * h, axis=1)
    if RESIDUAL:
        out += kn
    return out - vn, h_gw2, h_gs2, h_sq


@device_function
def layer2_read(qn, kn, delta2, scale1, scores1, rd, rm, ra, b1, b2, w1, s1, w2, s2, a1, a2,
                n, dk, dv, DK, DH, DV, NT, BC: tl.constexpr, BU: tl.constexpr,
                BT: tl.constexpr, BV: tl.constexpr, ACT: tl.constexpr, PREC: tl.constexpr,
                ANCHOR: tl.constexpr):  # fmt: skip
    """Pass 2: Hq H^T ``[C, U]``, Hq W2, Hq S2 and Hq A2 (0 without ANCHOR) ``[C, Dv]``
    (W1's factor is s1 D1)."""
    hh = tl.zeros([BC, BU], dtype=qn.dtype)
    hq_w2 = tl.zeros([BC, BV], dtype=qn.dtype)
    hq_s2 = tl.zeros([BC, BV], dtype=qn.dtype)
    hq_a2 = tl.zeros([BC, BV], dtype=qn.dtype)
    for t in range(NT):
        hid = t * BT + tl.arange(0, BT)
        b1_t, b2_t = base_tiles(b1, b2, w1, w2, n, hid, dk, dv, DK, DH, DV)
        _, h, _, _, _, d1 = factor_tile(kn, delta2, b1_t, b2_t, ACT, PREC)
        w1_t, s1_t = load_tile(w1, dk, hid, DK, DH, DH), load_tile(s1, dk, hid, DK, DH, DH)
        w2_t = load_tile(w2, hid, dv, DH, DV, DV)
        a1_t, a2_t = anchor_tiles(a1, a2, hid, dk, dv, DK, DH, DV, w1_t, w2_t, ANCHOR)
        _, _, _, hq, _ = read_tile(qn, scores1, scale1[:, None] * d1, w1_t, s1_t, a1_t, rd, rm,
                                   ra, ACT, PREC, ANCHOR)  # fmt: skip
        hh += tl.dot(hq, tl.trans(h), input_precision=PREC)
        hq_w2 += tl.dot(hq, w2_t, input_precision=PREC)
        hq_s2 += tl.dot(hq, load_tile(s2, hid, dv, DH, DV, DV), input_precision=PREC)
        if ANCHOR:
            hq_a2 += tl.dot(hq, a2_t, input_precision=PREC)
    return hh, hq_w2, hq_s2, hq_a2


@device_function
def base_gradients(kn, delta2, g_delta2, clip_d1, clip_h, b1, b2, w1, w2, gz_part, gp, gw1,
                   gw2, gb1, gb2, n, dk, dv, DK, DH, DV, DHP, NT, BU: tl.constexpr,
                   BK: tl.constexpr, BT: tl.constexpr, ACT: tl.constexpr, PREC: tl.constexpr,
                   CLIP: tl.constexpr):  # fmt: skip
    """Pass 4: gZ from the scratch part and the complete gD2; add gB1, gB2 to the start-state
    gradient (chunk n > 0, whose base is its start) or write them out (chunk 0). With CLIP the
    clip's terms join: ``clip_d1`` (-kappa1 |k|^2) times D1 into gD1, ``clip_h`` (-kappa2
    |D2|^2) times H into gH. Returns chunk n's gk share gZ B1^T."""
    u = tl.arange(0, BU)
    later_k, later_h = tl.where(n > 0, DK, 0), tl.where(n > 0, DH, 0)
    first_k, first_h = DK - later_k, DH - later_h
    g_k = tl.zeros([BU, BK], dtype=kn.dtype)
    for t in range(NT):
        hid = t * BT + tl.arange(0, BT)
        b1_t, b2_t = base_tiles(b1, b2, w1, w2, n, hid, dk, dv, DK, DH, DV)
        h, dh, ddh = activation(tl.dot(kn, b1_t, input_precision=PREC), ACT)
        g_z = load_tile(gz_part, u, hid, BU, DHP, DHP)
        g_z += tl.dot(g_delta2, tl.trans(b2_t), input_precision=PREC) * dh
        g_p = load_tile(gp, u, hid, BU, DHP, DHP)
        if CLIP:  # gD1 += clip_d1 D1 with D1 = P act'(Z); gH += clip_h H with H = act(Z)
            p = tl.dot(delta2, tl.trans(b2_t), input_precision=PREC)
            g_z += clip_d1[:, None] * p * p * dh * ddh + clip_h[:, None] * h * dh
            g_p += clip_d1[:, None] * p * dh * dh
        g_k += tl.dot(g_z, tl.trans(b1_t), input_precision=PREC)
        g_b1 = tl.dot(tl.trans(kn), g_z, input_precision=PREC)
        g_b2 = tl.dot(tl.trans(g_p), delta2, input_precision=PREC)
        g_b2 += tl.dot(tl.trans(h), g_delta2, input_precision=PREC)
        g_w1 = load_tile(gw1, dk, hid, later_k, DH, DH) + g_b1
        g_w2 = load_tile(gw2, hid, dv, later_h, DV, DV) + g_b2
        store_tile(gw1, g_w1, dk, hid, later_k, DH, DH)
        store_tile(gw2, g_w2, hid, dv, later_h, DV, DV)
        store_tile(gb1, g_b1, dk, hid, first_k, DH, DH)
        store_tile(gb2, g_b2, hid, dv, first_h, DV, DV)
    return g_k
