"""The chunked dual form of the memory recurrence (docs/memory.md derives it).

Axes: B batch, T tokens, H heads, Dk/Dv key/value width, N chunks, C chunk size, c Omega
window, U = C + c - 1 key columns per chunk, M materialised Muon rows (C or 1).

The stream is laid on the chunk grid anchored at its start: a call that begins inside a chunk
is padded on the left, one that ends inside a chunk on the right; padding rows are identity
steps (no gradient, no decay, no momentum, masked out of every coefficient). Key columns of
chunk n are its C tokens plus the c - 1 before it (the Omega halo), whose gradients are taken
at chunk n's base weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from einops import rearrange
from torch.utils.checkpoint import checkpoint as activation_checkpoint

from .chunk_muon import muon_chunk_step
from .chunk_update import decayed_rank_update
from .clipping import clip_factors
from .coefficients import (
    Chunk,
    ChunkGates,
    momentum_coefficients,
    muon_coefficients,
    omega_band,
    safe_log,
    safe_log1m,
)
from .memory_models import MemoryModel
from .newton_schulz import newton_schulz5
from .options import MemoryGates, ScanInputs
from .state import MemoryState, TensorDict, last_tokens


def _to_grid(x: torch.Tensor, left: int, right: int, size: int) -> torch.Tensor:
    """``[B, H, T, ...]`` -> ``[B, H, N, C, ...]``, zero-padded on the time axis."""
    pad = [0, 0] * (x.ndim - 3) + [left, right]
    return rearrange(F.pad(x, pad), "b h (n c) ... -> b h n c ...", c=size)


def _key_windows(x: torch.Tensor, halo: torch.Tensor, left: int, right: int, size: int):
    """Key columns ``[B, H, N, U, D]``: chunk n sees its tokens and the c - 1 before them."""
    window = size + halo.shape[2]
    cols = F.pad(torch.cat([halo, x], dim=2), [0, 0, left, right])  # [B, H, NC + c - 1, D]
    return rearrange(cols.unfold(2, window, size), "b h n d u -> b h n u d")


def _grid_gates(gates: MemoryGates, position: int, left: int, right: int, size: int) -> ChunkGates:
    """Gates ``[B, T, H(, c)]`` -> the chunk grid, with Omega taps before the stream masked."""
    rows = lambda g: _to_grid(rearrange(g, "b t h ... -> b h t ..."), left, right, size)  # noqa: E731
    length = gates.lr.shape[1]
    device = gates.lr.device
    valid = torch.zeros(left + length + right, dtype=torch.bool, device=device)
    valid[left : left + length] = True
    band = None
    if gates.omega is not None:
        window = gates.omega.shape[-1]
        absolute = position + torch.arange(length, device=device)
        taps_exist = absolute[:, None] - torch.arange(window, device=device) >= 0  # [T, c]
        band = omega_band(rows(gates.omega * taps_exist[:, None, :]))
    return ChunkGates(
        lr=rows(gates.lr),
        log_momentum=rows(safe_log(gates.momentum)),
        log_keep=rows(safe_log1m(gates.decay)),
        valid=rearrange(valid, "(n c) -> n c", c=size),
        band=band,
    )


def _flat(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, ...rows, cols]`` -> ``[B*H, rows, cols]`` (a view) for the fused BLAS calls."""
    return x.reshape(-1, *x.shape[-2:])


def momentum_chunk_step(memory: MemoryModel, chunk: Chunk, *, max_grad_norm: float | None = None):
    """One ``Chunk`` of rule "momentum" (``MomentumCoefficients``): gradients at its ``base``
    (clipped to ``max_grad_norm`` per token and weight), from its start (``weights``,
    ``momentum``) = (W0, S0), with its decay target ``anchor`` A or None.

    Scalars ride on the small operands and products accumulate in place (``baddbmm_``), so
    the large weight matrices are read once per product and never pass through elementwise ops.
    """
    coef, base, weights, momentum, q, k, v, anchor = chunk
    factors = clip_factors(memory.grad_factors(base, k, v), max_grad_norm)

    def linear(name: str, x: torch.Tensor) -> torch.Tensor:  # row i: x_i W_i, by eq. (4)
        a, b = factors[name]
        scores = (x @ a.transpose(-1, -2)) * coef.read_grad  # [B, H, C, U]
        out = torch.bmm(_flat(coef.read_keep[..., None] * x), _flat(weights[name]))
        out.baddbmm_(_flat(coef.read_momentum[..., None] * x), _flat(momentum[name]))
        out.baddbmm_(_flat(scores), _flat(b), alpha=-1.0)
        if anchor is not None:  # + (1 - beta_i) x_i A (section 10)
            out.baddbmm_(_flat(coef.read_anchor[..., None] * x), _flat(anchor[name]))
        return out.view(*x.shape[:-1], out.shape[-1])

    y = memory.forward_with(linear, q)
    per_memory = lambda x: x.reshape(-1, 1, 1)  # noqa: E731  [B, H] -> [B*H, 1, 1]
    new_weights, new_momentum = {}, {}
    for name, (a, b) in factors.items():
        end_weights, end_momentum = decayed_rank_update(
            _flat(weights[name]),
            _flat(momentum[name]),
            end_keep=per_memory(coef.end_keep),
            end_momentum=per_memory(coef.end_momentum),
            momentum_carry=per_memory(coef.momentum_carry),
            a_t=_flat(a.transpose(-1, -2)),
            end_rows=_flat(coef.end_grad[..., None] * b),
            momentum_rows=_flat(coef.momentum_grad[..., None] * b),
        )
        new_weights[name] = end_weights.view(weights[name].shape)
        new_momentum[name] = end_momentum.view(weights[name].shape)
    return y, with_anchor(new_weights, anchor, coef.end_anchor), new_momentum


def with_anchor(weights: TensorDict, anchor: TensorDict | None, end_anchor: torch.Tensor):
    """W_end + (1 - beta_{C-1}) A for a decay target A (``end_anchor`` ``[B, H]``)."""
    if anchor is None:
        return weights
    scale = end_anchor[..., None, None]
    return {name: w + scale * anchor[name] for name, w in weights.items()}


def _split_chunks(coef) -> list:
    """Per-chunk coefficients from ``[B, H, N, ...]`` fields. ``unbind`` rather than indexing:
    indexing chunk n makes its backward write a zero-filled ``[.., N, ..]`` gradient per chunk,
    O(N^2) in all; unbind's backward stacks once."""
    names = list(coef.__dataclass_fields__)
    per_field = [getattr(coef, name).unbind(2) for name in names]
    return [type(coef)(**dict(zip(names, values))) for values in zip(*per_field)]


def _run_chunks(step, memory, coefs, *, q_grid, k_cols, v_cols, state, anchor, checkpoint):
    """The sequential loop: chunk n's base weights are the weights chunk n - 1 left."""
    weights, mom, base = state.weights, state.momentum, state.chunk_base()
    inputs = zip(_split_chunks(coefs), q_grid.unbind(2), k_cols.unbind(2), v_cols.unbind(2))
    outputs = []
    for n, (coef, q, k, v) in enumerate(inputs):
        if n > 0:
            base = weights
        chunk = Chunk(coef, base, weights, mom, q, k, v, anchor)
        if checkpoint and torch.is_grad_enabled():
            y, weights, mom = activation_checkpoint(step, memory, chunk, use_reentrant=False)
        else:
            y, weights, mom = step(memory, chunk)
        outputs.append(y)
    return torch.cat(outputs, dim=2), weights, mom, base


def memory_scan_chunk(
    inputs: ScanInputs, *, newton_schulz: Callable[..., torch.Tensor] = newton_schulz5
) -> tuple[torch.Tensor, MemoryState]:
    """Chunked dual form; same arguments and result as ``memory_scan_reference`` (inputs
    checked, in the compute dtype, halo prepared). ``newton_schulz``: the NS5 the Muon rules
    use, ``newton_schulz5``'s signature (``impl="triton"`` passes its fused kernel)."""
    memory, q, k, v, gates, state, options = inputs
    length, size, window = q.shape[1], options.chunk_size, options.omega_window
    left = state.position % size
    num_chunks = math.ceil((left + length) / size)
    right = num_chunks * size - left - length
    q, k, v = (rearrange(x, "b t h d -> b h t d") for x in (q, k, v))
    halo_k, halo_v = state.halo_keys, state.halo_values

    grid_gates = _grid_gates(gates, state.position, left, right, size)
    clip = options.max_grad_norm
    if options.update_rule == "momentum":
        coefs = momentum_coefficients(grid_gates, options.read)
        step = partial(momentum_chunk_step, max_grad_norm=clip)
    else:
        per_chunk = options.update_rule == "muon_chunk"
        coefs = muon_coefficients(grid_gates, options.read, per_chunk)
        step = partial(
            muon_chunk_step,
            checkpointed=options.checkpoint,
            max_grad_norm=clip,
            newton_schulz=newton_schulz,
        )
    q_grid = _to_grid(q, left, right, size)  # [B, H, N, C, Dk]
    k_cols = _key_windows(k, halo_k, left, right, size)  # [B, H, N, U, Dk]
    v_cols = _key_windows(v, halo_v, left, right, size)  # [B, H, N, U, Dv]

    y, weights, mom, base = _run_chunks(
        step,
        memory,
        coefs,
        q_grid=q_grid,
        k_cols=k_cols,
        v_cols=v_cols,
        state=state,
        anchor=gates.decay_to,
        checkpoint=options.checkpoint,
    )
    y = y[:, :, left : left + length]  # [B, H, T, Dv]

    halos = (last_tokens(halo_k, k, window), last_tokens(halo_v, v, window))
    new_state = state.advanced(length, weights, mom, base, halos, options)
    return rearrange(y, "b h t d -> b t h d"), new_state
