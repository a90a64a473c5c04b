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

import torch
import torch.nn.functional as F
from einops import rearrange
from torch.utils.checkpoint import checkpoint as activation_checkpoint

from .chunk_update import decayed_rank_update
from .coefficients import (
    Gates,
    MuonCoefficients,
    PlainCoefficients,
    muon_coefficients,
    omega_band,
    plain_coefficients,
    safe_log,
    safe_log1m,
)
from .memory_models import MemoryModel
from .newton_schulz import newton_schulz5
from .state import MemoryState, last_tokens


def _to_grid(x: torch.Tensor, left: int, right: int, size: int) -> torch.Tensor:
    """``[B, H, T, ...]`` -> ``[B, H, N, C, ...]``, zero-padded on the time axis."""
    pad = [0, 0] * (x.ndim - 3) + [left, right]
    return rearrange(F.pad(x, pad), "b h (n c) ... -> b h n c ...", c=size)


def _key_windows(x: torch.Tensor, halo: torch.Tensor, left: int, right: int, size: int):
    """Key columns ``[B, H, N, U, D]``: chunk n sees its tokens and the c - 1 before them."""
    window = size + halo.shape[2]
    cols = F.pad(torch.cat([halo, x], dim=2), [0, 0, left, right])  # [B, H, NC + c - 1, D]
    return rearrange(cols.unfold(2, window, size), "b h n d u -> b h n u d")


def _grid_gates(lr, momentum, decay, omega_gate, position, left, right, size) -> Gates:
    """Gates ``[B, T, H(, c)]`` -> the chunk grid, with Omega taps before the stream masked."""
    rows = lambda g: _to_grid(rearrange(g, "b t h ... -> b h t ..."), left, right, size)  # noqa: E731
    length = lr.shape[1]
    valid = torch.zeros(left + length + right, dtype=torch.bool, device=lr.device)
    valid[left : left + length] = True
    band = None
    if omega_gate is not None:
        window = omega_gate.shape[-1]
        absolute = position + torch.arange(length, device=lr.device)
        taps_exist = absolute[:, None] - torch.arange(window, device=lr.device) >= 0  # [T, c]
        band = omega_band(rows(omega_gate * taps_exist[:, None, :]))
    return Gates(
        lr=rows(lr),
        log_momentum=rows(safe_log(momentum)),
        log_keep=rows(safe_log1m(decay)),
        valid=rearrange(valid, "(n c) -> n c", c=size),
        band=band,
    )


def _flat(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, ...rows, cols]`` -> ``[B*H, rows, cols]`` (a view) for the fused BLAS calls."""
    return x.reshape(-1, *x.shape[-2:])


def _plain_chunk(memory: MemoryModel, coef: PlainCoefficients, base, weights, momentum, q, k, v):
    """One chunk of Titans momentum: q ``[B, H, C, Dk]``, k/v ``[B, H, U, D]``.

    Scalars ride on the small operands and products accumulate in place (``baddbmm_``), so
    the large weight matrices are read once per product and never pass through elementwise ops.
    """
    factors = memory.grad_factors(base, k, v)

    def linear(name: str, x: torch.Tensor) -> torch.Tensor:  # row i: x_i W_i, by eq. (4)
        a, b = factors[name]
        scores = (x @ a.transpose(-1, -2)) * coef.read_grad  # [B, H, C, U]
        out = torch.bmm(_flat(coef.read_decay[..., None] * x), _flat(weights[name]))
        out.baddbmm_(_flat(coef.read_momentum[..., None] * x), _flat(momentum[name]))
        out.baddbmm_(_flat(scores), _flat(b), alpha=-1.0)
        return out.view(*x.shape[:-1], out.shape[-1])

    y = memory.forward_with(linear, q)
    new_weights, new_momentum = {}, {}
    scalars = [
        x.reshape(-1, 1, 1) for x in (coef.end_decay, coef.end_momentum, coef.momentum_decay)
    ]
    for name, (a, b) in factors.items():
        shape = weights[name].shape
        new_weights[name], new_momentum[name] = (
            x.view(shape)
            for x in decayed_rank_update(
                _flat(weights[name]), _flat(momentum[name]), *scalars, _flat(a.transpose(-1, -2)),
                _flat(coef.end_grad[..., None] * b), _flat(coef.momentum_grad[..., None] * b),
            )
        )  # fmt: skip
    return y, new_weights, new_momentum


def _muon_chunk(memory: MemoryModel, coef: MuonCoefficients, base, weights, momentum, q, k, v):
    """One chunk of Muon momentum; materialises this chunk's M momenta ``[B, H, M, m, n]``.

    Each weight is handled in its wide orientation (m = min(d_in, d_out) rows), where NS5
    works, so tall weights (d_in > d_out) never pass a transposed copy of their momenta around:
    the rank-1 factors swap roles and reads multiply by the transposed wide matrix.
    """
    factors = memory.grad_factors(base, k, v)
    orthogonal, new_momentum, tall = {}, {}, {}
    for name, (a, b) in factors.items():
        tall[name] = a.shape[-1] > b.shape[-1]
        left, right = (b, a) if tall[name] else (a, b)
        start = momentum[name].transpose(-1, -2) if tall[name] else momentum[name]
        # S_m = rows_momentum_m S0 + sum_u rows_grad_mu left_u^T right_u: one matmul over (m, r)
        weighted = rearrange(
            coef.rows_grad[..., None] * left[:, :, None], "b h m u r -> b h (m r) u"
        )
        rows = rearrange(weighted @ right, "b h (m r) c -> b h m r c", r=left.shape[-1])
        rows = rows + coef.rows_momentum[..., None, None] * start.unsqueeze(2)
        orthogonal[name] = newton_schulz5(rows)  # wide: [B, H, M, m, n]
        last = rows[:, :, -1]
        new_momentum[name] = (last.transpose(-1, -2) if tall[name] else last).contiguous()

    def linear(name: str, x: torch.Tensor) -> torch.Tensor:
        wide = orthogonal[name]
        # x_i NS5(S_m) for every row i and momentum m: [B, H, M, C, d_out]
        through = x.unsqueeze(2) @ (wide.transpose(-1, -2) if tall[name] else wide)
        update = torch.einsum("bhim,bhmie->bhie", coef.read_update, through)
        return coef.read_decay[..., None] * (x @ weights[name]) - update

    y = memory.forward_with(linear, q)
    new_weights = {}
    for name in factors:
        step = torch.einsum("bhm,bhmrc->bhrc", coef.end_update, orthogonal[name])
        step = step.transpose(-1, -2) if tall[name] else step
        new_weights[name] = coef.end_decay[..., None, None] * weights[name] - step
    return y, new_weights, new_momentum


def _split_chunks(coef) -> list:
    """Per-chunk coefficients from ``[B, H, N, ...]`` fields. ``unbind`` rather than indexing:
    indexing chunk n makes its backward write a zero-filled ``[.., N, ..]`` gradient per chunk,
    O(N^2) in all; unbind's backward stacks once."""
    names = list(coef.__dataclass_fields__)
    per_field = [getattr(coef, name).unbind(2) for name in names]
    return [type(coef)(**dict(zip(names, values))) for values in zip(*per_field)]


def _run_chunks(step, memory, coefs, q_grid, k_cols, v_cols, state, checkpoint):
    """The sequential loop: chunk n's base weights are the weights chunk n - 1 left."""
    weights, mom, base = state.weights, state.momentum, state.chunk_base()
    inputs = zip(_split_chunks(coefs), q_grid.unbind(2), k_cols.unbind(2), v_cols.unbind(2))
    outputs = []
    for n, (coef, q, k, v) in enumerate(inputs):
        if n > 0:
            base = weights
        args = (memory, coef, base, weights, mom, q, k, v)
        if checkpoint and torch.is_grad_enabled():
            y, weights, mom = activation_checkpoint(step, *args, use_reentrant=False)
        else:
            y, weights, mom = step(*args)
        outputs.append(y)
    return torch.cat(outputs, dim=2), weights, mom, base


def memory_scan_chunk(
    memory: MemoryModel,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lr: torch.Tensor,
    momentum: torch.Tensor,
    decay: torch.Tensor,
    state: MemoryState,
    chunk_size: int,
    omega_window: int,
    omega_gate: torch.Tensor | None,
    muon: str | None,
    read: str,
    checkpoint: bool,
) -> tuple[torch.Tensor, MemoryState]:
    """Chunked dual form; same arguments and result as ``memory_scan_reference``
    (inputs already validated and in the compute dtype)."""
    length, size, window = q.shape[1], chunk_size, omega_window
    left = state.position % size
    num_chunks = math.ceil((left + length) / size)
    right = num_chunks * size - left - length
    q, k, v = (rearrange(x, "b t h d -> b h t d") for x in (q, k, v))
    halo_k, halo_v = state.halo_keys, state.halo_values  # prepared by the caller

    gates = _grid_gates(lr, momentum, decay, omega_gate, state.position, left, right, size)
    if muon is None:
        coefs, step = plain_coefficients(gates, read), _plain_chunk
    else:
        coefs, step = muon_coefficients(gates, read, muon == "chunk"), _muon_chunk
    q_grid = _to_grid(q, left, right, size)  # [B, H, N, C, Dk]
    k_cols = _key_windows(k, halo_k, left, right, size)  # [B, H, N, U, Dk]
    v_cols = _key_windows(v, halo_v, left, right, size)  # [B, H, N, U, Dv]

    y, weights, mom, base = _run_chunks(
        step, memory, coefs, q_grid, k_cols, v_cols, state, checkpoint
    )
    y = y[:, :, left : left + length]  # [B, H, T, Dv]

    end = state.position + length
    new_state = MemoryState(
        weights=weights,
        momentum=mom,
        base=base if end % size else None,
        position=end,
        halo_keys=last_tokens(halo_k, k, window),
        halo_values=last_tokens(halo_v, v, window),
        chunk_size=size,
        omega_window=window,
    )
    return rearrange(y, "b h t d -> b t h d"), new_state
