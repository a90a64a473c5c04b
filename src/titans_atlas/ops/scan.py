"""``memory_scan``: the public entry to the memory recurrence (spec/memory.md).

Axes: B batch, T tokens, H heads, Dk key/query width, Dv value width, c Omega window.
Validates the input, prepares the state, and dispatches to one of two forms with one
signature: ``memory_scan_reference`` (the per-token loop) or ``memory_scan_chunk`` (the
chunked dual form).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..validation import check_int
from .memory_models import MemoryModel
from .scan_chunk import memory_scan_chunk
from .scan_reference import memory_scan_reference
from .state import MemoryState

IMPLS = {"reference": memory_scan_reference, "chunk": memory_scan_chunk}
READ_MODES = ("after", "before")
MUON_MODES = {False: None, True: "token", "token": "token", "chunk": "chunk"}
# A chunked call costs about one full chunk however few tokens it holds, the per-token loop
# about T tokens; the loop wins up to roughly C / 16 tokens (benchmarks/memory_scan.py, "auto").
AUTO_TOKENS_PER_CHUNK = 16


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
        impl: "chunk", "reference" or "auto" (the per-token loop for calls of at most
            max(1, chunk_size // 16) tokens, e.g. decoding; the chunked form otherwise).
        checkpoint: recompute each chunk in backward (memory O(chunks x state + one chunk)).

    Dtypes: q, k, v and the gates may be of different floating dtypes (as autocast makes
    them); all are cast to the state's dtype, in which the recurrence runs with autocast off.

    Returns:
        y ``[B, T, H, Dv]`` in the promoted dtype of q, k and v (their dtype when they match),
        and the new ``MemoryState`` (weights and momentum in the state's dtype, fp32 under
        autocast).
    """
    muon_mode = _check_inputs(
        memory,
        q,
        k,
        v,
        lr,
        momentum,
        decay,
        state,
        chunk_size,
        omega_window,
        omega_gate,
        muon,
        read,
        impl,
    )
    out_dtype = output_dtype(q, k, v)
    if q.shape[1] == 0:  # nothing to read or write: the stream stands still
        return q.new_zeros(*q.shape[:3], v.shape[-1], dtype=out_dtype), state
    if impl == "auto":
        short = q.shape[1] <= max(1, chunk_size // AUTO_TOKENS_PER_CHUNK)
        impl = "reference" if short else "chunk"
    # The recurrence runs in the state's precision (fp32 under autocast): bf16 rounding would
    # compound over a stream. Inputs of any floating dtypes -- CUDA autocast hands over fp32
    # q, k (its normalisation runs in fp32) beside bf16 v and gates -- are cast to it.
    dtype = compute_dtype(state)
    state = _prepare_state(state, q, v, chunk_size, omega_window, dtype)
    inputs = [x.to(dtype) for x in (q, k, v, lr, momentum, decay)]
    gate = None if omega_gate is None else omega_gate.to(dtype)
    with torch.autocast(device_type=q.device.type, enabled=False):
        y, new_state = IMPLS[impl](
            memory, *inputs, state, chunk_size, omega_window, gate, muon_mode, read, checkpoint
        )
    return y.to(out_dtype), new_state


def compute_dtype(state: MemoryState) -> torch.dtype:
    """The dtype the recurrence runs in: the state's (fp32 for a model under autocast)."""
    return next(iter(state.weights.values())).dtype


def output_dtype(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.dtype:
    """The dtype of the reads: torch's type promotion of q, k and v (their dtype when they
    match; fp32 for CUDA autocast's fp32 q, k beside bf16 v)."""
    return torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)


def _prepare_state(state, q, v, chunk_size, omega_window, dtype) -> MemoryState:
    """Fill in what a fresh state leaves open: the chunk grid and a zero Omega halo."""
    batch, _, heads, _ = q.shape
    halo_k, halo_v = state.halo_keys, state.halo_values
    if halo_k is None or state.position == 0:  # before the first token the halo is all zeros
        halo_k = q.new_zeros(batch, heads, omega_window - 1, q.shape[-1], dtype=dtype)
        halo_v = v.new_zeros(batch, heads, omega_window - 1, v.shape[-1], dtype=dtype)
    return replace(
        state,
        halo_keys=halo_k,
        halo_values=halo_v,
        chunk_size=chunk_size,
        omega_window=omega_window,
    )


def _check_inputs(
    memory,
    q,
    k,
    v,
    lr,
    momentum,
    decay,
    state,
    chunk_size,
    omega_window,
    omega_gate,
    muon,
    read,
    impl,
) -> str | None:
    """Raise ValueError naming the offending argument; return the normalised Muon mode."""
    if not isinstance(memory, MemoryModel):
        raise ValueError(f"memory must be a MemoryModel, got {type(memory).__name__}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 4:
            raise ValueError(f"{name} must be [B, T, H, D], got shape {list(x.shape)}")
        if not x.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {x.dtype}")
        if not torch.isfinite(x).all():
            raise ValueError(f"{name} contains NaN or inf")
    batch, length, heads, _ = q.shape
    if k.shape != q.shape:
        raise ValueError(f"k must have q's shape {list(q.shape)}, got {list(k.shape)}")
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(f"v must be [{batch}, {length}, {heads}, Dv], got {list(v.shape)}")
    if q.shape[-1] != memory.dim_in:
        raise ValueError(f"q/k width {q.shape[-1]} != memory.dim_in {memory.dim_in}")
    if v.shape[-1] != memory.dim_out:
        raise ValueError(f"v width {v.shape[-1]} != memory.dim_out {memory.dim_out}")
    _check_gate("lr", lr, q.shape[:3], low=0.0, high=None)
    _check_gate("momentum", momentum, q.shape[:3], low=0.0, high=1.0)
    _check_gate("decay", decay, q.shape[:3], low=0.0, high=1.0)
    check_int("chunk_size", chunk_size, 1)
    check_int("omega_window", omega_window, 1)
    if omega_gate is None and omega_window > 1:
        raise ValueError(f"omega_gate [B, T, H, {omega_window}] is required when omega_window > 1")
    if omega_gate is not None:
        _check_gate("omega_gate", omega_gate, (*q.shape[:3], omega_window), low=0.0, high=1.0)
    if read not in READ_MODES:
        raise ValueError(f"read must be one of {READ_MODES}, got {read!r}")
    if impl not in (*IMPLS, "auto"):
        raise ValueError(f"impl must be one of {(*IMPLS, 'auto')}, got {impl!r}")
    if not any(muon is key or (isinstance(muon, str) and muon == key) for key in MUON_MODES):
        raise ValueError(f"muon must be one of False, True, 'token', 'chunk', got {muon!r}")
    muon_mode = MUON_MODES[muon]
    _check_state(memory, state, batch, heads, chunk_size, omega_window)
    return muon_mode


def _check_gate(name, gate, shape, low, high) -> None:
    if not isinstance(gate, torch.Tensor) or tuple(gate.shape) != tuple(shape):
        got = list(gate.shape) if isinstance(gate, torch.Tensor) else type(gate).__name__
        raise ValueError(f"{name} must have shape {list(shape)}, got {got}")
    if not gate.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {gate.dtype}")
    if (
        not torch.isfinite(gate).all()
        or (gate < low).any()
        or (high is not None and (gate > high).any())
    ):
        bounds = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must lie in {bounds} (finite, not NaN)")


def _check_state(memory, state, batch, heads, chunk_size, omega_window) -> None:
    if not isinstance(state, MemoryState):
        raise ValueError("state must be a MemoryState (start one with memory.initial_state)")
    memory.check_weights(state.weights, batched=True, name="state.weights")
    memory.check_weights(state.momentum, batched=True, name="state.momentum")
    if (state.batch_size, state.num_heads) != (batch, heads):
        raise ValueError(
            f"state is for batch {state.batch_size} x heads {state.num_heads}, "
            f"inputs are batch {batch} x heads {heads}"
        )
    if state.chunk_size is not None and state.chunk_size != chunk_size and state.position > 0:
        raise ValueError(
            f"chunk_size={chunk_size} differs from the stream's chunk_size={state.chunk_size} "
            "(the chunk grid is anchored at the stream start)"
        )
    if state.omega_window is not None and state.omega_window != omega_window and state.position:
        raise ValueError(
            f"omega_window={omega_window} differs from the stream's {state.omega_window}"
        )
    if state.position % chunk_size and state.base is None:
        raise ValueError("state stands inside a chunk but has no base weights (state.base)")
