"""``memory_scan``: the public entry to the memory recurrence (docs/memory.md).

Axes: B batch, T tokens, H heads, Dk key/query width, Dv value width, c Omega window.
Bundles the keyword arguments into ``MemoryGates`` and ``ScanOptions``, checks the input,
prepares the state, and dispatches to one of the forms, each taking one ``ScanInputs``:
``memory_scan_reference`` (the per-token loop), ``memory_scan_chunk`` (the chunked dual form)
or, when asked for, ``ops.triton.memory_scan_triton`` (the chunked form's loop fused on a GPU).
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from typing import Any

import torch

from ..common.options import auto_impl, scan_update_rule
from ..validation import check_choice
from .checks import check_scan_inputs, check_scan_outputs, value_checks_enabled
from .memory_models import MemoryModel
from .options import SCAN_IMPLS, MemoryGates, ScanInputs, ScanOptions
from .scan_chunk import memory_scan_chunk
from .scan_reference import memory_scan_reference
from .scan_token import memory_scan_token
from .state import MemoryState


def _fused_triton(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, MemoryState]:
    """``ops.triton.memory_scan_triton`` (docs/gpu.md), imported on first use: ``import
    titans_atlas`` never imports triton (an optional extra). A pass-through: it takes the
    forms' one ``ScanInputs``."""
    if importlib.util.find_spec("triton") is None:
        raise ValueError(
            "impl='triton' needs the triton package: pip install 'titans-atlas[triton]' "
            "(or use impl='chunk')"
        )
    from .triton import memory_scan_triton as fused

    return fused(*args, **kwargs)


IMPLS = {
    "reference": memory_scan_reference,
    "token": memory_scan_token,
    "chunk": memory_scan_chunk,
    "triton": _fused_triton,
}


def memory_scan(
    memory: MemoryModel,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lr: torch.Tensor,
    momentum: torch.Tensor,
    decay: torch.Tensor,
    state: MemoryState,
    *,
    chunk_size: int = 64,
    omega_window: int = 1,
    omega_gate: torch.Tensor | None = None,
    muon: bool | str = False,
    read: str = "after",
    impl: str = "auto",
    checkpoint: bool = False,
    update_rule: str | None = None,
    max_grad_norm: float | None = None,
    decay_to: dict[str, torch.Tensor] | None = None,
    validate: bool | None = None,
) -> tuple[torch.Tensor, MemoryState]:
    """Run the memory over a stream and return its reads and the state after the last token.

    Args:
        memory: the memory model (``LinearMemory``, ``MLPMemory``, ``GatedMLPMemory``).
        q, k: queries and keys ``[B, T, H, Dk]``; v: values ``[B, T, H, Dv]``.
        lr, momentum, decay: per-token gates theta >= 0, eta in [0, 1], alpha in [0, 1],
            each ``[B, T, H]``.
        state: from ``memory.initial_state(...)`` or a previous call.
        chunk_size: tokens per gradient base point (C = 1 is the fully sequential rule).
        omega_window, omega_gate: ATLAS Omega rule; gate ``[B, T, H, c]`` in [0, 1]; without a
            gate the window must be 1.
        muon: False (Titans momentum), True or "token" (per-token Muon), "chunk" (one NS5 step
            per chunk, at the token that closes it; a different model, see docs/memory.md).
        read: "after" (y_t = f(W_t, q_t)) or "before" (y_t = f(W_{t-1}, q_t)).
        impl: "chunk", "reference" (the per-token loop: the equations as written), "token"
            (the same loop with its weight updates fused, ops/scan_token.py) or "auto"
            ("token" for calls of at most max(1, chunk_size // 16) tokens, e.g. decoding;
            the chunked form otherwise), or
            "triton": the chunked form with its chunk loop fused into Triton kernels (CUDA,
            extra [triton]; the Titans momentum rule with linear / depth-2 MLP memories, a
            ValueError naming anything else; the Muon rules with NS5 fused; docs/gpu.md).
        checkpoint: recompute each chunk in backward (memory O(chunks x state + one chunk)).
        update_rule: the rule by name, "momentum", "muon" or "muon_chunk" (``UPDATE_RULES``);
            the alternative to ``muon=`` (give one of the two).
        max_grad_norm: g_max > 0: every token's inner gradient of every weight (every Omega
            tap) is clipped to Frobenius norm g_max before the gates and the momentum see it
            -- for Muon too -- which bounds the memory for any input (docs/memory.md, section
            9). None (default): the spec's recurrence, unclipped.
        decay_to: A, name -> ``[H, d_in, d_out]`` or ``[B, H, d_in, d_out]`` (e.g. the initial
            weights): the decay pulls toward A instead of zero, W_t = (1 - alpha_t) W_{t-1} +
            alpha_t A + S_t (docs/memory.md, section 10). Gradients flow into A. None
            (default): toward zero, as the spec.
        validate: run the value checks (NaN/inf in q, k, v and the state, gates out of range;
            then reads and a new state that diverged to NaN/inf from finite inputs, as an
            unbounded ``lr`` can), which read the tensors: one host-device sync per call.
            None takes the default set by ``ops.validating(...)`` (True); under
            ``torch.compile`` they never run. Shape, dtype and option checks always run.

    Dtypes: q, k, v and the gates may be of different floating dtypes (as autocast makes
    them); all are cast to the state's dtype, in which the recurrence runs with autocast off.

    Returns:
        y ``[B, T, H, Dv]`` in the promoted dtype of q, k and v (their dtype when they match),
        and the new ``MemoryState`` (weights and momentum in the state's dtype, fp32 under
        autocast).
    """
    options = ScanOptions(
        chunk_size=chunk_size,
        omega_window=omega_window,
        update_rule=scan_update_rule(muon, update_rule),
        read=read,
        checkpoint=checkpoint,
        max_grad_norm=max_grad_norm,
    )
    gates = MemoryGates(lr, momentum, decay, omega=omega_gate, decay_to=decay_to)
    check_choice("impl", impl, SCAN_IMPLS)
    faults = check_scan_inputs(
        ScanInputs(memory, q, k, v, gates, state, options), values=value_checks_enabled(validate)
    )
    out_dtype = output_dtype(q, k, v)
    if q.shape[1] == 0:  # nothing to read or write: the stream stands still
        if faults is not None:
            faults.raise_first()
        return q.new_zeros(*q.shape[:3], v.shape[-1], dtype=out_dtype), state
    impl = auto_impl(impl, q.shape[1], chunk_size, loop="token")
    # The recurrence runs in the state's precision (fp32 under autocast): bf16 rounding would
    # compound over a stream. Inputs of any floating dtypes -- CUDA autocast hands over fp32
    # q, k (its normalisation runs in fp32) beside bf16 v and gates -- are cast to it.
    dtype = compute_dtype(state)
    state = _prepare_state(state, q, v, options, dtype)
    gates = _batched_target(gates, state)
    q, k, v = (x.to(dtype) for x in (q, k, v))
    with torch.autocast(device_type=q.device.type, enabled=False):
        y, new_state = IMPLS[impl](ScanInputs(memory, q, k, v, gates.to(dtype), state, options))
    if faults is not None:  # the inputs' value checks and the outputs', in one sync
        check_scan_outputs(faults, y, new_state)
    return y.to(out_dtype), new_state


def compute_dtype(state: MemoryState) -> torch.dtype:
    """The dtype the recurrence runs in: the state's (fp32 for a model under autocast)."""
    return next(iter(state.weights.values())).dtype


def output_dtype(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.dtype:
    """The dtype of the reads: torch's type promotion of q, k and v (their dtype when they
    match; fp32 for CUDA autocast's fp32 q, k beside bf16 v)."""
    return torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)


def _batched_target(gates: MemoryGates, state: MemoryState) -> MemoryGates:
    """A per-head decay target ``[H, d_in, d_out]`` laid out per sample, once per call (the
    chunk steps multiply it in flattened ``[B*H, ...]`` batches)."""
    if gates.decay_to is None:
        return gates
    batch = state.batch_size
    batched = {
        name: w if w.ndim == 4 else w.unsqueeze(0).expand(batch, *w.shape).contiguous()
        for name, w in gates.decay_to.items()
    }
    return replace(gates, decay_to=batched)


def _prepare_state(state, q, v, options: ScanOptions, dtype: torch.dtype) -> MemoryState:
    """Fill in what a fresh state leaves open: the chunk grid and a zero Omega halo."""
    batch, _, heads, _ = q.shape
    halo_k, halo_v = state.halo_keys, state.halo_values
    if halo_k is None or state.position == 0:  # before the first token the halo is all zeros
        halo_k = q.new_zeros(batch, heads, options.omega_window - 1, q.shape[-1], dtype=dtype)
        halo_v = v.new_zeros(batch, heads, options.omega_window - 1, v.shape[-1], dtype=dtype)
    return replace(
        state,
        halo_keys=halo_k.to(dtype),
        halo_values=halo_v.to(dtype),
        chunk_size=options.chunk_size,
        omega_window=options.omega_window,
    )
