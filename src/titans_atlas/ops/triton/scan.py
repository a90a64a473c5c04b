"""``memory_scan_triton``: the chunked dual form with the chunk loop fused into Triton kernels.

Axes: B batch, T tokens, H heads, Dk/Dv key/value width, N chunks, C chunk size, U = C + c - 1.
Same arguments and result as ``memory_scan_chunk`` (inputs validated, state prepared and in
the compute dtype by ``memory_scan``). The gate-only work (log-space coefficient matrices,
Omega band, read "before" shift) is the torch form's own ``momentum_coefficients``: a fixed
number of batched launches whatever the length, differentiated by autograd. The sequential
chunk loop -- where the torch form issues ~50 launches per chunk forward and ~140 backward
for the MLP memory -- is one kernel forward and one backward (docs/gpu.md).
"""

from __future__ import annotations

import math
from functools import partial

import torch
from einops import rearrange

from ..coefficients import MomentumCoefficients, momentum_coefficients
from ..memory_models import LinearMemory, MemoryModel, MLPMemory
from ..options import ScanInputs, ScanOptions
from ..scan_chunk import _grid_gates, _key_windows, _to_grid, memory_scan_chunk
from ..state import MemoryState, last_tokens
from ._tiles import PRECISIONS, interpreter_requested, interpreting
from .autograd import ACTIVATION_CODES, LinearScan, MLPScan
from .newton_schulz import newton_schulz5_triton


def _check_fused_memory(memory: MemoryModel) -> None:
    """The memories whose whole chunk step the momentum kernels implement."""
    if isinstance(memory, MLPMemory):
        if memory.depth != 2:
            raise ValueError(f"impl='triton' supports MLPMemory depth 2, got depth={memory.depth}")
        if memory.activation not in ACTIVATION_CODES:
            raise ValueError(f"impl='triton' has no activation {memory.activation!r}")
    elif not isinstance(memory, LinearMemory):
        raise ValueError(
            "impl='triton' supports LinearMemory and MLPMemory (depth 2) with the momentum "
            f"rule, got memory={type(memory).__name__} (use impl='chunk')"
        )


def check_supported(
    memory: MemoryModel, options: ScanOptions, device: torch.device, dtype: torch.dtype
) -> None:
    """Raise ValueError naming the option the fused kernels do not implement. The Muon rules
    run the torch chunk loop around the fused NS5, so they take any memory."""
    if options.update_rule == "momentum":
        _check_fused_memory(memory)
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"impl='triton' computes in float32 or float64, got state dtype {dtype}")
    if interpreter_requested() != interpreting():
        raise RuntimeError(
            "TRITON_INTERPRET changed after triton was first imported: set it before "
            "anything imports triton (torch does, e.g. with its flop counter)"
        )
    if device.type != "cuda" and not interpreting():
        raise ValueError(
            f"impl='triton' needs CUDA tensors (got device {device.type!r}); set "
            "TRITON_INTERPRET=1 before triton is first imported to run it on the CPU"
        )


def _flat(fields) -> list[torch.Tensor]:
    """Coefficients ``[B, H, N, ...]`` -> contiguous ``[B*H, N, ...]``."""
    return [x.reshape(-1, *x.shape[2:]).contiguous() for x in fields]


def _flat_coefficients(coef: MomentumCoefficients) -> list[torch.Tensor]:
    """The 8 coefficient fields the kernels read, flat and in their order."""
    return _flat((
        coef.read_keep, coef.read_momentum, coef.read_grad, coef.end_keep,
        coef.end_momentum, coef.end_grad, coef.momentum_carry, coef.momentum_grad,
    ))  # fmt: skip


def _flat_state(tensors: dict[str, torch.Tensor], names) -> list[torch.Tensor]:
    """Named state tensors ``[B, H, ...]`` -> contiguous ``[B*H, ...]``, in ``names`` order."""
    return _flat(tensors[name] for name in names)


def _fused_loop(memory, grids, coef: MomentumCoefficients, state, target, precision, clip):
    """Run the fused kernels; return y ``[B*H, N, C, Dv]``, the end weights and momentum, and
    the start weights of the last chunk (lists in ``weight_shapes`` order, ``[B*H, ...]``).
    ``target``: the decay target ``{name: [B, H, ...]}`` or None."""
    names = list(memory.weight_shapes())
    coefs = _flat_coefficients(coef)
    weights = _flat_state(state.weights, names)
    momentum = _flat_state(state.momentum, names)
    base = _flat_state(state.chunk_base(), names)
    anchor = None if target is None else _flat_state(target, names)
    tensors = [*grids, *coefs, *weights, *momentum, *base, *(anchor or [])]
    save = torch.is_grad_enabled() and any(x.requires_grad for x in tensors)
    if isinstance(memory, LinearMemory):
        return _linear_loop(
            grids, coefs, weights[0], momentum[0], base[0], anchor, (precision, save, clip)
        )
    options = (precision, ACTIVATION_CODES[memory.activation], memory.residual, save, clip)
    # the MLP kernels take the target with its coefficients (1 - beta per read row, per end)
    target_args = [None] * 4
    if anchor is not None:
        target_args = [*_flat((coef.read_anchor, coef.end_anchor)), *anchor]
    y, w1, s1, w2, s2, last1, last2 = MLPScan.apply(
        options, *grids, *coefs, weights[0], momentum[0], weights[1], momentum[1], *base,
        *target_args,
    )  # fmt: skip
    return y, [w1, w2], [s1, s2], [last1, last2]


def _linear_loop(grids, coefs, weights, momentum, base, anchor, options):
    """The linear memory's kernel. A decay target A needs no kernel of its own: the
    recurrence is then the zero-target one on W - A with values v - k A, read as
    q (W - A) + q A (docs/memory.md, section 10), exactly; A's gradient comes from autograd
    through these few batched products."""
    q, k, v = grids  # [G, N, C, Dk], [G, N, U, Dk], [G, N, U, Dv]
    if anchor is not None:
        (target,) = anchor  # [G, Dk, Dv]
        v = v - torch.einsum("gnuk,gkv->gnuv", k, target)
        weights, base = weights - target, base - target
    y, w, s, last = LinearScan.apply(options, q, k, v, *coefs, weights, momentum, base)
    if anchor is not None:
        y = y + torch.einsum("gnck,gkv->gncv", q, target)
        w, last = w + target, last + target
    return y, [w], [s], [last]


def _chunk_grids(q, k, v, state: MemoryState, left: int, right: int, size: int) -> list:
    """q ``[B, H, T, Dk]`` -> ``[B*H, N, C, Dk]``; k, v and the Omega halo -> ``[B*H, N, U, D]``
    (contiguous, as the kernels index them)."""
    grids = (
        _to_grid(q, left, right, size),
        _key_windows(k, state.halo_keys, left, right, size),
        _key_windows(v, state.halo_values, left, right, size),
    )
    return [rearrange(x, "b h n r d -> (b h) n r d").contiguous() for x in grids]


def _next_base(state: MemoryState, inside: int, num_chunks: int, last_start: dict):
    """The base weights the next call needs: none at a chunk boundary, else the last chunk's
    start weights (the incoming base when this call stayed inside one chunk)."""
    if not inside:
        return None
    return state.chunk_base() if num_chunks == 1 else last_start


def memory_scan_triton(
    inputs: ScanInputs, *, precision: str = "ieee"
) -> tuple[torch.Tensor, MemoryState]:
    """Fused chunked dual form; same arguments and result as ``memory_scan_chunk``.

    The Muon rules ("muon", "muon_chunk") run ``memory_scan_chunk``'s loop with NS5 fused
    (``newton_schulz5_triton``: one kernel per chunk forward and backward, instead of 26 and 76
    operations); ``options.checkpoint`` then works as there. For the momentum rule it has no
    effect: the fused backward already recomputes every chunk from its saved start state.
    ``precision`` is ``tl.dot``'s input precision for float32 (see ``PRECISIONS``); float64 is
    always exact.
    """
    memory, q, k, v, gates, state, options = inputs
    dtype = next(iter(state.weights.values())).dtype
    check_supported(memory, options, q.device, dtype)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    precision = "ieee" if dtype == torch.float64 else precision  # TF32 is a float32 mode
    if options.update_rule != "momentum":  # Muon: the torch chunk loop, NS5 fused
        ns5 = partial(newton_schulz5_triton, precision=precision)
        return memory_scan_chunk(inputs, newton_schulz=ns5)
    batch, length, heads = q.shape[:3]
    size, window = options.chunk_size, options.omega_window
    left = state.position % size
    num_chunks = math.ceil((left + length) / size)
    right = num_chunks * size - left - length
    q, k, v = (rearrange(x, "b t h d -> b h t d") for x in (q, k, v))
    grid_gates = _grid_gates(gates, state.position, left, right, size)
    coef = momentum_coefficients(grid_gates, options.read)
    grids = _chunk_grids(q, k, v, state, left, right, size)
    y, weights, moms, last_start = _fused_loop(
        memory, grids, coef, state, gates.decay_to, precision, options.max_grad_norm
    )
    y = rearrange(y, "(b h) n c d -> b (n c) h d", b=batch)[:, left : left + length]

    def unflat(flat: list[torch.Tensor]) -> dict[str, torch.Tensor]:  # [B*H, ...] -> [B, H, ...]
        return {n: x.view(batch, heads, *x.shape[1:]) for n, x in zip(memory.weight_shapes(), flat)}

    end = state.position + length
    new_state = MemoryState(
        weights=unflat(weights),
        momentum=unflat(moms),
        base=_next_base(state, end % size, num_chunks, unflat(last_start)),
        position=end,
        halo_keys=last_tokens(state.halo_keys, k, window),
        halo_values=last_tokens(state.halo_values, v, window),
        chunk_size=size,
        omega_window=window,
    )
    return y, new_state
