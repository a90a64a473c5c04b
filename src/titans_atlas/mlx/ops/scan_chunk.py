"""The chunked dual form of the memory recurrence in MLX (mirrors
``titans_atlas.ops.scan_chunk``; docs/memory.md derives it).

Axes: B batch, T tokens, H heads, Dk/Dv key/value width, N chunks, C chunk size, c Omega
window, U = C + c - 1 key columns per chunk, M materialised Muon rows (C or 1).

The stream is laid on the chunk grid anchored at its start (padding rows are identity steps);
key columns of chunk n are its C tokens plus the c - 1 before it. Each chunk step is one
``mx.compile``d graph per (memory, rule, read mode, shapes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields

import mlx.core as mx

from ...common.options import MemoryGates, ScanInputs
from .clipping import clip_factors
from .coefficients import (
    ChunkGates,
    momentum_coefficients,
    muon_coefficients,
    omega_band,
    safe_log,
    safe_log1m,
)
from .memory_models import MemoryModel
from .newton_schulz import newton_schulz5
from .scan_reference import MUON_MODES
from .state import MemoryState, last_tokens


@mx.custom_function
def _unbind0(x: mx.array) -> tuple[mx.array, ...]:
    return tuple(x[i] for i in range(x.shape[0]))


@_unbind0.vjp
def _unbind0_vjp(primals, cotangents, outputs):
    # One stack instead of N zero-filled full-size slice gradients (O(N^2) in all).
    return mx.stack(cotangents, axis=0)


def unbind(x: mx.array, axis: int) -> tuple[mx.array, ...]:
    """``torch.unbind`` for MLX: the slices of ``x`` along ``axis``, with a linear-cost VJP."""
    return _unbind0(mx.moveaxis(x, axis, 0))


def _to_grid(x: mx.array, left: int, right: int, size: int) -> mx.array:
    """``[B, H, T, ...]`` -> ``[B, H, N, C, ...]``, zero-padded on the time axis."""
    pad = [(0, 0), (0, 0), (left, right)] + [(0, 0)] * (x.ndim - 3)
    x = mx.pad(x, pad)
    return x.reshape(x.shape[0], x.shape[1], -1, size, *x.shape[3:])


def _key_windows(x: mx.array, halo: mx.array, left: int, right: int, size: int) -> mx.array:
    """Key columns ``[B, H, N, U, D]``: chunk n sees its tokens and the c - 1 before them."""
    window = size + halo.shape[2]
    cols = mx.pad(mx.concatenate([halo, x], axis=2), [(0, 0), (0, 0), (left, right), (0, 0)])
    num_chunks = (cols.shape[2] - window) // size + 1
    index = mx.arange(num_chunks)[:, None] * size + mx.arange(window)[None, :]  # [N, U]
    return cols[:, :, index]


def _grid_gates(gates: MemoryGates, position: int, left: int, right: int, size: int) -> ChunkGates:
    """Gates ``[B, T, H(, c)]`` -> the chunk grid, with Omega taps before the stream masked."""

    def rows(g: mx.array) -> mx.array:  # [B, T, H, ...] -> [B, H, N, C, ...]
        return _to_grid(mx.swapaxes(g, 1, 2), left, right, size)

    lr, momentum, decay, omega_gate = gates.lr, gates.momentum, gates.decay, gates.omega
    length = lr.shape[1]
    steps = mx.arange(left + length + right)
    valid = ((steps >= left) & (steps < left + length)).reshape(-1, size)  # [N, C]
    band = None
    if omega_gate is not None:
        window = omega_gate.shape[-1]
        absolute = position + mx.arange(length)
        taps_exist = (absolute[:, None] - mx.arange(window)[None, :]) >= 0  # [T, c]
        band = omega_band(rows(omega_gate * taps_exist[:, None, :].astype(omega_gate.dtype)))
    return ChunkGates(
        lr=rows(lr),
        log_momentum=rows(safe_log(momentum)),
        log_keep=rows(safe_log1m(decay)),
        valid=valid,
        band=band,
    )


def _t(x: mx.array) -> mx.array:
    return mx.swapaxes(x, -1, -2)


def _with_anchor(weights: dict, anchor: dict, end_anchor: mx.array) -> dict:
    """W_end + (1 - beta_{C-1}) A for a decay target A (``anchor`` empty: none)."""
    if not anchor:
        return weights
    return {n: w + end_anchor[..., None, None] * anchor[n] for n, w in weights.items()}


def _plain_step(memory: MemoryModel, max_grad_norm: float | None) -> Callable:
    """One chunk of Titans momentum: q ``[B, H, C, Dk]``, k/v ``[B, H, U, D]``; ``anchor``
    the decay target A (an empty dict: decay toward zero)."""

    def step(coef, base, weights, momentum, q, k, v, anchor):
        factors = clip_factors(memory.grad_factors(base, k, v), max_grad_norm)

        def linear(name: str, x: mx.array) -> mx.array:  # row i: x_i W_i, by eq. (4)
            a, b = factors[name]
            scores = (x @ _t(a)) * coef["read_grad"]  # [B, H, C, U]
            out = (coef["read_keep"][..., None] * x) @ weights[name]
            out = out + (coef["read_momentum"][..., None] * x) @ momentum[name]
            if anchor:  # + (1 - beta_i) x_i A (section 10)
                out = out + (coef["read_anchor"][..., None] * x) @ anchor[name]
            return out - scores @ b

        y = memory.forward_with(linear, q)
        # W' = end_keep W + end_momentum S - a^T (end_grad b);  S' = momentum_carry S - a^T (...)
        scalar = {
            n: coef[n][..., None, None] for n in ("end_keep", "end_momentum", "momentum_carry")
        }
        new_weights, new_momentum = {}, {}
        for name, (a, b) in factors.items():
            at = _t(a)  # [B, H, d_in, U]
            new_weights[name] = (
                scalar["end_keep"] * weights[name]
                + scalar["end_momentum"] * momentum[name]
                - at @ (coef["end_grad"][..., None] * b)
            )
            new_momentum[name] = scalar["momentum_carry"] * momentum[name] - at @ (
                coef["momentum_grad"][..., None] * b
            )
        return y, _with_anchor(new_weights, anchor, coef["end_anchor"]), new_momentum

    return step


def _muon_step(memory: MemoryModel, max_grad_norm: float | None) -> Callable:
    """One chunk of Muon momentum; materialises this chunk's M momenta ``[B, H, M, m, n]``
    in each weight's wide orientation (m = min(d_in, d_out) rows)."""

    def step(coef, base, weights, momentum, q, k, v, anchor):
        factors = clip_factors(memory.grad_factors(base, k, v), max_grad_norm)
        orthogonal, new_momentum, tall = {}, {}, {}
        for name, (a, b) in factors.items():
            tall[name] = a.shape[-1] > b.shape[-1]
            left, right = (b, a) if tall[name] else (a, b)
            start = _t(momentum[name]) if tall[name] else momentum[name]
            # S_m = rows_momentum_m S0 + sum_u rows_grad_mu left_u^T right_u
            weighted = coef["rows_grad"][..., None] * left[:, :, None]  # [B, H, M, U, r]
            rows = _t(weighted) @ right[:, :, None]  # [B, H, M, r, cols]
            rows = rows + coef["rows_carry"][..., None, None] * start[:, :, None]
            orthogonal[name] = newton_schulz5(rows)  # wide: [B, H, M, m, n]
            last = rows[:, :, -1]
            new_momentum[name] = _t(last) if tall[name] else last

        def linear(name: str, x: mx.array) -> mx.array:
            wide = orthogonal[name]
            # x_i NS5(S_m) for every row i and momentum m, [B, H, C, M, d_out]
            through = (x[:, :, None] @ (_t(wide) if tall[name] else wide)).swapaxes(2, 3)
            # row i: sum_m read_update_im x_i NS5(S_m), one (1 x M) @ (M x d_out) product per row
            update = (coef["read_update"][..., None, :] @ through)[..., 0, :]  # [B, H, C, d_out]
            out = coef["read_keep"][..., None] * (x @ weights[name]) - update
            if anchor:  # + (1 - beta_i) x_i A (section 10)
                out = out + coef["read_anchor"][..., None] * (x @ anchor[name])
            return out

        y = memory.forward_with(linear, q)
        new_weights = {}
        for name in factors:
            step_ = (coef["end_update"][..., None, None] * orthogonal[name]).sum(axis=2)
            step_ = _t(step_) if tall[name] else step_
            new_weights[name] = coef["end_keep"][..., None, None] * weights[name] - step_
        return y, _with_anchor(new_weights, anchor, coef["end_anchor"]), new_momentum

    return step


_STEPS: dict[tuple, Callable] = {}


def chunk_step(
    memory: MemoryModel, muon: str | None, compiled: bool = True, max_grad_norm: float | None = None
) -> Callable:
    """The (compiled, cached) chunk step for ``memory``, an update rule and a clip."""
    key = (memory, muon is not None, compiled, max_grad_norm)
    if key not in _STEPS:
        step = (_plain_step if muon is None else _muon_step)(memory, max_grad_norm)
        _STEPS[key] = mx.compile(step) if compiled else step
    return _STEPS[key]


def _per_chunk(coef) -> list[dict[str, mx.array]]:
    """Per-chunk coefficient dicts from ``[B, H, N, ...]`` fields."""
    names = [f.name for f in fields(coef)]
    per_field = [unbind(getattr(coef, name), 2) for name in names]
    return [dict(zip(names, values)) for values in zip(*per_field)]


def memory_scan_chunk(inputs: ScanInputs, *, compiled: bool = True) -> tuple[mx.array, MemoryState]:
    """Chunked dual form; same arguments and result as ``memory_scan_reference``
    (inputs already validated and in the compute dtype, ``decay_to`` ``[B, H, ...]``)."""
    memory, q, k, v, gates, state, options = inputs
    muon = MUON_MODES[options.update_rule]
    length, size, window = q.shape[1], options.chunk_size, options.omega_window
    left = state.position % size
    num_chunks = math.ceil((left + length) / size)
    right = num_chunks * size - left - length
    q, k, v = (mx.swapaxes(x, 1, 2) for x in (q, k, v))  # [B, H, T, D]
    halo_k, halo_v = state.halo_keys, state.halo_values  # prepared by the caller

    grid_gates = _grid_gates(gates, state.position, left, right, size)
    if muon is None:
        coefs = momentum_coefficients(grid_gates, options.read)
    else:
        coefs = muon_coefficients(grid_gates, options.read, muon == "chunk")
    step = chunk_step(memory, muon, compiled, options.max_grad_norm)
    anchor = gates.decay_to or {}
    chunks = zip(
        _per_chunk(coefs),
        unbind(_to_grid(q, left, right, size), 2),  # [B, H, C, Dk] each
        unbind(_key_windows(k, halo_k, left, right, size), 2),  # [B, H, U, Dk] each
        unbind(_key_windows(v, halo_v, left, right, size), 2),  # [B, H, U, Dv] each
    )
    weights, mom, base = state.weights, state.momentum, state.chunk_base()
    outputs = []
    for n, (coef, q_n, k_n, v_n) in enumerate(chunks):
        if n > 0:
            base = weights  # chunk n's base weights are the weights chunk n - 1 left
        y_n, weights, mom = step(coef, base, weights, mom, q_n, k_n, v_n, anchor)
        outputs.append(y_n)
    y = mx.concatenate(outputs, axis=2)[:, :, left : left + length]  # [B, H, T, Dv]

    halos = (last_tokens(halo_k, k, window), last_tokens(halo_v, v, window))
    new_state = state.advanced(length, weights, mom, base, halos, options)
    return mx.swapaxes(y, 1, 2), new_state
