"""Hand-written backward of the fused MLP chunk loop (forward and notation: mlp.py).

The chunks are walked in reverse. The gradient of a chunk's end state (W1', S1', W2', S2')
comes in through one of a ping-pong pair of state-sized slots; the gradient of its start
state goes out through the other. Per chunk, from the saved start state, four passes over
the hidden tiles recompute what they need (nothing per token is stored; passes 1, 2 and 4
are device functions in mlp_passes.py):

    1. D2 (needs all tiles), and H gW2', H gS2' (the end-state terms of D2's gradient)
    2. Hq H^T, Hq W2, Hq S2 (need all tiles): the layer-2 read's gradient
    3. per tile: layer-1 read and end-state gradients, gD1 and its share of gD2; the
       start-state gradient; the part of gZ known so far and gP (to two scratch tiles)
    4. per tile, now that gD2 is complete: gZ, the base-weight gradients gB1, gB2, and gk

With CLIP (mlp.py) the factors are s2 D2 and s1 D1, and one more pass before pass 2 finds
|D1|^2. Passes 1-3 then collect the gradients of the clipped factors; the clip's own backward
(``clip_kappa``: g_b = s g - kappa |a|^2 b, g_a = -kappa |b|^2 a) needs g . b summed over every
hidden tile, so its per-row kappa is known only after pass 3. Its terms are per-row multiples
of quantities known earlier: the D2 share of D1's term is accumulated in pass 3 (``y_p``),
and the Z and P shares are recomputed in pass 4 from P = D2 B2^T.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._tiles import (
    clip_kappa,
    load_anchor_coefficients,
    load_chunk_coefficients,
    load_tile,
    store_chunk_coefficient_grads,
    store_row,
    store_tile,
)
from .mlp import anchor_tiles, base_tiles, clip_scales, copy_state, factor_tile, read_tile
from .mlp_passes import base_gradients, layer2_read, output_error


@triton.jit
def mlp_backward_kernel(
    q, k, v, rd, rm, rg, ed, em, eg, md, mg, b1, b2, w1_st, s1_st, w2_st, s2_st,
    gy, gw1_end, gs1_end, gw2_end, gs2_end, gw1_last, gw2_last,  # incoming gradients
    gq, gk, gv, grd, grm, grg, ged, gem, geg, gmd, gmg,  # gradients of the chunk grid
    gw1_st, gs1_st, gw2_st, gs2_st, gb1, gb2,  # state gradient slots [G, 2, ...], base grads
    scratch_z, scratch_p,  # [G, BU, DHP] per-program scratch between passes 3 and 4
    clip,  # [1] the clip threshold c (read only with CLIP)
    ra, ea, a1, a2,  # decay target (ANCHOR): coefficients [G, N, C], [G, N]; A1, A2 [G, ...]
    gra, gea, ga1, ga2,  # their gradients (ga1, ga2 zeroed by the caller: summed over chunks)
    N, C: tl.constexpr, U: tl.constexpr, DK: tl.constexpr, DH: tl.constexpr, DV: tl.constexpr,
    BC: tl.constexpr, BU: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
    ACT: tl.constexpr, RESIDUAL: tl.constexpr, PREC: tl.constexpr, CLIP: tl.constexpr,
    ANCHOR: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(0).to(tl.int64)
    nt = tl.cdiv(DH, BT)
    dhp = nt * BT
    i, u, dk, dv = tl.arange(0, BC), tl.arange(0, BU), tl.arange(0, BK), tl.arange(0, BV)
    sz1, sz2 = DK * DH, DH * DV
    b1, b2, gb1, gb2 = b1 + bh * sz1, b2 + bh * sz2, gb1 + bh * sz1, gb2 + bh * sz2
    gw1_last, gw2_last = gw1_last + bh * sz1, gw2_last + bh * sz2
    a1, a2, ga1, ga2 = a1 + bh * sz1, a2 + bh * sz2, ga1 + bh * sz1, ga2 + bh * sz2
    scratch_z, scratch_p = scratch_z + bh * BU * dhp, scratch_p + bh * BU * dhp
    end = bh * 2 + N % 2  # the slot chunk N - 1 reads its end-state gradient from
    copy_state(gw1_end + bh * sz1, gw1_st + end * sz1, DK, DH, nt, BK, BT, False)
    copy_state(gs1_end + bh * sz1, gs1_st + end * sz1, DK, DH, nt, BK, BT, False)
    copy_state(gw2_end + bh * sz2, gw2_st + end * sz2, DH, DV, nt, BT, BV, True)
    copy_state(gs2_end + bh * sz2, gs2_st + end * sz2, DH, DV, nt, BT, BV, True)
    tl.debug_barrier()
    for rev in range(N):
        n = N - 1 - rev
        cn = bh * N + n
        cur, gin, gout = bh * (N + 1) + n, bh * 2 + (n + 1) % 2, bh * 2 + n % 2
        w1, s1, w2, s2 = w1_st + cur * sz1, s1_st + cur * sz1, w2_st + cur * sz2, s2_st + cur * sz2
        gi_w1, gi_s1 = gw1_st + gin * sz1, gs1_st + gin * sz1
        gi_w2, gi_s2 = gw2_st + gin * sz2, gs2_st + gin * sz2
        go_w1, go_s1 = gw1_st + gout * sz1, gs1_st + gout * sz1
        go_w2, go_s2 = gw2_st + gout * sz2, gs2_st + gout * sz2
        qn = load_tile(q + cn * C * DK, i, dk, C, DK, DK)
        kn = load_tile(k + cn * U * DK, u, dk, U, DK, DK)
        vn = load_tile(v + cn * U * DV, u, dv, U, DV, DV)
        g_out = load_tile(gy + cn * C * DV, i, dv, C, DV, DV)
        read_keep, read_momentum, read_grad, scalars, end_grad, momentum_grad = (
            load_chunk_coefficients(rd, rm, rg, ed, em, eg, md, mg, cn, C, U, BC, BU)
        )
        end_keep, end_momentum, momentum_carry = scalars
        read_anchor, end_anchor = read_keep, end_keep  # stand-ins, unused without ANCHOR
        if ANCHOR:
            read_anchor, end_anchor = load_anchor_coefficients(ra, ea, cn, C, BC)
        qk = tl.dot(qn, tl.trans(kn), input_precision=PREC)
        scores1 = read_grad * qk
        delta2, h_gw2, h_gs2, h_sq = output_error(
            kn, vn, b1, b2, w1, w2, gi_w2, gi_s2, n, dk, dv, DK, DH, DV, nt,
            BU, BT, BV, ACT, RESIDUAL, PREC,
        )  # fmt: skip
        scale1 = tl.full([BU], 1.0, dtype=qn.dtype)  # the clip's s1, s2 (1: no clip)
        scale2 = tl.full([BU], 1.0, dtype=qn.dtype)
        if CLIP:
            scale1, binds1, floor1, scale2, binds2, floor2, k_sq, d1_sq, d2_sq = clip_scales(
                kn, delta2, h_sq, b1, b2, w1, w2, clip, n, dk, dv, DK, DH, DV, nt,
                BU, BT, ACT, PREC,
            )  # fmt: skip
        delta2c = scale2[:, None] * delta2  # W2's factor b; g_delta2c its gradient
        g_delta2c = -end_grad[:, None] * h_gw2 - momentum_grad[:, None] * h_gs2
        g_eg = -tl.sum(h_gw2 * delta2c, axis=1)
        g_mg = -tl.sum(h_gs2 * delta2c, axis=1)
        hh, hq_w2, hq_s2, hq_a2 = layer2_read(
            qn, kn, delta2, scale1, scores1, read_keep, read_momentum, read_anchor, b1, b2, w1,
            s1, w2, s2, a1, a2, n, dk, dv, DK, DH, DV, nt, BC, BU, BT, BV, ACT, PREC, ANCHOR,
        )  # fmt: skip
        g_scores2 = -tl.dot(g_out, tl.trans(delta2c), input_precision=PREC)  # [C, U]
        g_rg = g_scores2 * hh
        g_hh = g_scores2 * read_grad
        g_delta2c -= tl.dot(tl.trans(read_grad * hh), g_out, input_precision=PREC)
        g_delta2 = tl.zeros([BU, BV], dtype=qn.dtype)  # D2's gradient through P = D2 B2^T
        y_p = tl.zeros([BU, BV], dtype=qn.dtype)  # sum over tiles of (P act'^2) B2 (clip term)
        g_dot_d1 = tl.zeros([BU], dtype=qn.dtype)  # gD1c . D1 over all tiles (clip term)
        g_rd = tl.sum(g_out * hq_w2, axis=1)
        g_rm = tl.sum(g_out * hq_s2, axis=1)
        g_ra = tl.sum(g_out * hq_a2, axis=1)
        g_ea = tl.zeros([BT], dtype=qn.dtype)  # per hidden unit, as g_ed
        g_q = tl.zeros([BC, BK], dtype=qn.dtype)
        if RESIDUAL:
            g_q += g_out
        g_scores1 = tl.zeros([BC, BU], dtype=qn.dtype)
        g_k = tl.zeros([BU, BK], dtype=qn.dtype)
        g_ed = tl.zeros([BT], dtype=qn.dtype)  # per hidden unit; summed after the loop
        g_em = tl.zeros([BT], dtype=qn.dtype)
        g_md = tl.zeros([BT], dtype=qn.dtype)
        last_k, last_h = tl.where(n == N - 1, DK, 0), tl.where(n == N - 1, DH, 0)
        for t in range(nt):  # pass 3
            hid = t * BT + tl.arange(0, BT)
            b1_t, b2_t = base_tiles(b1, b2, w1, w2, n, hid, dk, dv, DK, DH, DV)
            _, h, dh, ddh, p, d1_raw = factor_tile(kn, delta2, b1_t, b2_t, ACT, PREC)
            d1 = scale1[:, None] * d1_raw  # W1's factor b; g_d1 below is its gradient
            w1_t, s1_t = load_tile(w1, dk, hid, DK, DH, DH), load_tile(s1, dk, hid, DK, DH, DH)
            w2_t, s2_t = load_tile(w2, hid, dv, DH, DV, DV), load_tile(s2, hid, dv, DH, DV, DV)
            a1_t, a2_t = anchor_tiles(a1, a2, hid, dk, dv, DK, DH, DV, w1_t, w2_t, ANCHOR)
            qw, qs, qa, hq, dhq = read_tile(
                qn, scores1, d1, w1_t, s1_t, a1_t, read_keep, read_momentum, read_anchor,
                ACT, PREC, ANCHOR,
            )  # fmt: skip
            gi_w1_t = load_tile(gi_w1, dk, hid, DK, DH, DH)
            gi_s1_t = load_tile(gi_s1, dk, hid, DK, DH, DH)
            gi_w2_t = load_tile(gi_w2, hid, dv, DH, DV, DV)
            gi_s2_t = load_tile(gi_s2, hid, dv, DH, DV, DV)
            # layer-2 read -> layer-1 read
            g_hq = read_keep[:, None] * tl.dot(g_out, tl.trans(w2_t), input_precision=PREC)
            g_hq += read_momentum[:, None] * tl.dot(g_out, tl.trans(s2_t), input_precision=PREC)
            g_hq += tl.dot(g_hh, h, input_precision=PREC)
            if ANCHOR:
                g_hq += read_anchor[:, None] * tl.dot(g_out, tl.trans(a2_t), input_precision=PREC)
            g_zq = g_hq * dhq
            g_rd += tl.sum(g_zq * qw, axis=1)
            g_rm += tl.sum(g_zq * qs, axis=1)
            g_q += read_keep[:, None] * tl.dot(g_zq, tl.trans(w1_t), input_precision=PREC)
            g_q += read_momentum[:, None] * tl.dot(g_zq, tl.trans(s1_t), input_precision=PREC)
            g_scores1 -= tl.dot(g_zq, tl.trans(d1), input_precision=PREC)
            # D1's gradient: layer-1 read and end state
            k_gw1 = tl.dot(kn, gi_w1_t, input_precision=PREC)
            k_gs1 = tl.dot(kn, gi_s1_t, input_precision=PREC)
            g_d1 = -tl.dot(tl.trans(scores1), g_zq, input_precision=PREC)
            g_d1 -= end_grad[:, None] * k_gw1 + momentum_grad[:, None] * k_gs1
            g_eg -= tl.sum(k_gw1 * d1, axis=1)
            g_mg -= tl.sum(k_gs1 * d1, axis=1)
            g_k -= tl.dot(end_grad[:, None] * d1, tl.trans(gi_w1_t), input_precision=PREC)
            g_k -= tl.dot(momentum_grad[:, None] * d1, tl.trans(gi_s1_t), input_precision=PREC)
            g_dot_d1 += tl.sum(g_d1 * d1_raw, axis=1)
            g_d1 = scale1[:, None] * g_d1  # the clip's kappa term joins after the last tile
            g_p = g_d1 * dh
            g_delta2 += tl.dot(g_p, b2_t, input_precision=PREC)
            if CLIP:
                y_p += tl.dot(p * dh * dh, b2_t, input_precision=PREC)
            # gZ without its gD2 B2^T term (pass 4 adds it once gD2 is complete)
            g_h = tl.dot(tl.trans(g_hh), hq, input_precision=PREC)
            g_h -= tl.dot(end_grad[:, None] * delta2c, tl.trans(gi_w2_t), input_precision=PREC)
            g_h -= tl.dot(momentum_grad[:, None] * delta2c, tl.trans(gi_s2_t),
                          input_precision=PREC)  # fmt: skip
            store_tile(scratch_z, g_h * dh + g_d1 * p * ddh, u, hid, BU, dhp, dhp)
            store_tile(scratch_p, g_p, u, hid, BU, dhp, dhp)
            # start-state gradient (the last chunk's start weights are an output too)
            g_w1 = end_keep * gi_w1_t + load_tile(gw1_last, dk, hid, last_k, DH, DH)
            g_w1 += tl.dot(tl.trans(qn), read_keep[:, None] * g_zq, input_precision=PREC)
            g_s1 = end_momentum * gi_w1_t + momentum_carry * gi_s1_t
            g_s1 += tl.dot(tl.trans(qn), read_momentum[:, None] * g_zq, input_precision=PREC)
            g_w2 = end_keep * gi_w2_t + load_tile(gw2_last, hid, dv, last_h, DV, DV)
            g_w2 += tl.dot(tl.trans(hq), read_keep[:, None] * g_out, input_precision=PREC)
            g_s2 = end_momentum * gi_w2_t + momentum_carry * gi_s2_t
            g_s2 += tl.dot(tl.trans(hq), read_momentum[:, None] * g_out, input_precision=PREC)
            store_tile(go_w1, g_w1, dk, hid, DK, DH, DH)
            store_tile(go_s1, g_s1, dk, hid, DK, DH, DH)
            store_tile(go_w2, g_w2, hid, dv, DH, DV, DV)
            store_tile(go_s2, g_s2, hid, dv, DH, DV, DV)
            g_ed += tl.sum(gi_w1_t * w1_t, axis=0) + tl.sum(gi_w2_t * w2_t, axis=1)
            g_em += tl.sum(gi_w1_t * s1_t, axis=0) + tl.sum(gi_w2_t * s2_t, axis=1)
            g_md += tl.sum(gi_s1_t * s1_t, axis=0) + tl.sum(gi_s2_t * s2_t, axis=1)
            if ANCHOR:  # reads ra (q A1), ra (Hq A2) and chunk ends ea A: A's share
                g_ra += tl.sum(g_zq * qa, axis=1)
                g_q += read_anchor[:, None] * tl.dot(g_zq, tl.trans(a1_t), input_precision=PREC)
                g_ea += tl.sum(gi_w1_t * a1_t, axis=0) + tl.sum(gi_w2_t * a2_t, axis=1)
                g_a1 = load_tile(ga1, dk, hid, DK, DH, DH) + end_anchor * gi_w1_t
                g_a1 += tl.dot(tl.trans(qn), read_anchor[:, None] * g_zq, input_precision=PREC)
                g_a2 = load_tile(ga2, hid, dv, DH, DV, DV) + end_anchor * gi_w2_t
                g_a2 += tl.dot(tl.trans(hq), read_anchor[:, None] * g_out, input_precision=PREC)
                store_tile(ga1, g_a1, dk, hid, DK, DH, DH)
                store_tile(ga2, g_a2, hid, dv, DH, DV, DV)
        g_rg += g_scores1 * qk
        g_qk = g_scores1 * read_grad
        g_q += tl.dot(g_qk, kn, input_precision=PREC)
        g_k += tl.dot(tl.trans(g_qk), qn, input_precision=PREC)
        clip_d1 = tl.zeros([BU], dtype=qn.dtype)  # -kappa1 |k|^2 and -kappa2 |D2|^2
        clip_h = tl.zeros([BU], dtype=qn.dtype)
        if CLIP:  # the clip's backward: g_b = s g - kappa |a|^2 b, g_a = -kappa |b|^2 a
            kappa1 = clip_kappa(g_dot_d1, scale1, binds1, floor1)
            kappa2 = clip_kappa(tl.sum(g_delta2c * delta2, axis=1), scale2, binds2, floor2)
            clip_d1, clip_h = -kappa1 * k_sq, -kappa2 * d2_sq
            g_delta2 += clip_d1[:, None] * y_p - (kappa2 * h_sq)[:, None] * delta2
            g_k -= (kappa1 * d1_sq)[:, None] * kn
        g_delta2 += scale2[:, None] * g_delta2c
        if RESIDUAL:
            g_k += g_delta2
        tl.debug_barrier()  # pass 4 reads the scratch and start-gradient tiles of pass 3
        g_k += base_gradients(kn, delta2, g_delta2, clip_d1, clip_h, b1, b2, w1, w2,
                              scratch_z, scratch_p, go_w1, go_w2, gb1, gb2, n, dk, dv,
                              DK, DH, DV, dhp, nt, BU, BK, BT, ACT, PREC, CLIP)  # fmt: skip
        store_tile(gq + cn * C * DK, g_q, i, dk, C, DK, DK)
        store_tile(gk + cn * U * DK, g_k, u, dk, U, DK, DK)
        store_tile(gv + cn * U * DV, -g_delta2, u, dv, U, DV, DV)
        store_chunk_coefficient_grads(
            grd, grm, grg, ged, gem, geg, gmd, gmg, cn, C, U, g_rd, g_rm, g_rg,
            tl.sum(g_ed), tl.sum(g_em), g_eg, tl.sum(g_md), g_mg, BC, BU,
        )  # fmt: skip
        if ANCHOR:
            store_row(gra + cn * C, g_ra, i, C)
            tl.store(gea + cn, tl.sum(g_ea))
        tl.debug_barrier()  # chunk n - 1 reads this chunk's start-state gradient slot
