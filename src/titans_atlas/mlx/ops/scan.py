"""``memory_scan`` in MLX: the public entry to the memory recurrence (docs/memory.md),
mirroring ``titans_atlas.ops.scan``: validation, state preparation, dispatch between the
per-token loop and the chunked dual form.

Axes: B batch, T tokens, H heads, Dk key/query width, Dv value width, c Omega window.
"""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx

from ...common.checks import (
    check_decay_target,
    check_qkv_shapes,
    check_state_layout,
    diverged_message,
)
from ...common.options import (
    READ_MODES,
    MemoryGates,
    ScanInputs,
    ScanOptions,
    auto_impl,
    scan_update_rule,
)
from ...validation import check_int, check_number
from .memory_models import MemoryModel
from .scan_chunk import memory_scan_chunk
from .scan_reference import memory_scan_reference
from .state import MemoryState

IMPLS = {"reference": memory_scan_reference, "chunk": memory_scan_chunk}


def memory_scan(
    memory: MemoryModel,
    q: mx.array,
    k: mx.array,
    v: mx.array,
    lr: mx.array,
    momentum: mx.array,
    decay: mx.array,
    state: MemoryState,
    *,
    chunk_size: int = 64,
    omega_window: int = 1,
    omega_gate: mx.array | None = None,
    muon: bool | str = False,
    read: str = "after",
    impl: str = "auto",
    compiled: bool = True,
    update_rule: str | None = None,
    max_grad_norm: float | None = None,
    decay_to: dict[str, mx.array] | None = None,
    validate: bool = True,
) -> tuple[mx.array, MemoryState]:
    """Run the memory over a stream; the reads ``[B, T, H, Dv]`` and the state after it.

    The arguments are those of ``titans_atlas.ops.memory_scan`` (q, k ``[B, T, H, Dk]``, v
    ``[B, T, H, Dv]``, gates ``[B, T, H]``, Omega gate ``[B, T, H, c]``), as MLX arrays; the
    torch-only ``checkpoint`` is absent and ``compiled`` chooses ``mx.compile``d steps. The
    implementations take them bundled, as the torch ones: one ``ScanInputs`` holding
    ``MemoryGates`` and ``ScanOptions`` (``common/options.py``).
    ``max_grad_norm`` (per-token inner-gradient clip) and ``decay_to`` (the decay target,
    ``[H, ...]`` or ``[B, H, ...]`` per weight) are those of the torch side (docs/memory.md,
    sections 9 and 10).
    ``validate=False`` skips the checks that read values (NaN, gate ranges): they wait for
    the inputs to be computed, which an enclosing ``mx.compile`` cannot do. Shapes are always
    checked.
    """
    _check_inputs(
        memory, q, k, v, lr, momentum, decay, state, chunk_size, omega_window, omega_gate, validate
    )
    _check_modes(read, impl)
    update_rule = scan_update_rule(muon, update_rule)
    options = ScanOptions(chunk_size, omega_window, update_rule, read, False, max_grad_norm)
    _check_stability_options(memory, max_grad_norm, decay_to, q.shape[0], q.shape[2], validate)
    if q.shape[1] == 0:  # nothing to read or write: the stream stands still
        return mx.zeros((*q.shape[:3], v.shape[-1]), dtype=q.dtype), state
    impl = auto_impl(impl, q.shape[1], chunk_size)
    dtype = next(iter(state.weights.values())).dtype
    state = _prepare_state(state, q, v, chunk_size, omega_window, dtype)
    if decay_to is not None:  # per sample
        batch = q.shape[0]
        decay_to = {n: mx.broadcast_to(w, (batch, *w.shape[-3:])) for n, w in decay_to.items()}
    gates = MemoryGates(lr, momentum, decay, omega=omega_gate, decay_to=decay_to)
    gates = gates.map(lambda g: g.astype(dtype))  # in the compute dtype
    out_dtype = q.dtype
    q, k, v = (x.astype(dtype) for x in (q, k, v))
    inputs = ScanInputs(memory, q, k, v, gates, state, options)
    y, new_state = IMPLS[impl](inputs, compiled=compiled)
    if validate:  # finite inputs can still diverge (an unbounded lr): an error, not inf
        _check_outputs(y, new_state)
    return y.astype(out_dtype), new_state


def _check_outputs(y: mx.array, state) -> None:
    if not _all(mx.isfinite(y)):
        raise ValueError(diverged_message("the reads y"))
    for part, tensors in (("weight", state.weights), ("momentum", state.momentum)):
        for name, w in tensors.items():
            if not _all(mx.isfinite(w)):
                raise ValueError(diverged_message(f"the new {part} {name!r}"))


def _check_stability_options(memory, max_grad_norm, decay_to, batch, heads, values) -> None:
    """``max_grad_norm`` None or a finite number > 0; ``decay_to`` the memory's weights per
    head ``[H, ...]`` or per sample ``[B, H, ...]`` (ValueError naming the argument)."""
    if max_grad_norm is not None:
        check_number("max_grad_norm", max_grad_norm, 0.0)
    if decay_to is None:
        return
    check_decay_target(memory, decay_to, batch, heads, mx.array)
    for key, w in decay_to.items():
        if values and not _all(mx.isfinite(w)):
            raise ValueError(f"decay_to[{key!r}] contains NaN or inf")


def _prepare_state(state, q, v, chunk_size, omega_window, dtype) -> MemoryState:
    """Fill in what a fresh state leaves open: the chunk grid and a zero Omega halo."""
    batch, _, heads, _ = q.shape
    halo_k, halo_v = state.halo_keys, state.halo_values
    if halo_k is None or state.position == 0:  # before the first token the halo is all zeros
        halo_k = mx.zeros((batch, heads, omega_window - 1, q.shape[-1]), dtype=dtype)
        halo_v = mx.zeros((batch, heads, omega_window - 1, v.shape[-1]), dtype=dtype)
    return replace(
        state,
        halo_keys=halo_k,
        halo_values=halo_v,
        chunk_size=chunk_size,
        omega_window=omega_window,
    )


def _all(condition: mx.array) -> bool:
    return bool(mx.all(condition).item())


def _check_inputs(
    memory, q, k, v, lr, momentum, decay, state, chunk_size, omega_window, omega_gate, values
) -> None:
    """Raise ValueError naming the offending argument."""
    if not isinstance(memory, MemoryModel):
        raise ValueError(f"memory must be an MLX MemoryModel, got {type(memory).__name__}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, mx.array) or x.ndim != 4:
            got = list(x.shape) if isinstance(x, mx.array) else type(x).__name__
            raise ValueError(f"{name} must be an mx.array [B, T, H, D], got {got}")
        if not mx.issubdtype(x.dtype, mx.floating):
            raise ValueError(f"{name} must be a floating-point array, got {x.dtype}")
        if x.dtype != q.dtype:
            raise ValueError(f"{name} has dtype {x.dtype}, q has {q.dtype}; q, k, v must match")
        if values and not _all(mx.isfinite(x)):
            raise ValueError(f"{name} contains NaN or inf")
    check_qkv_shapes(memory, q, k, v)
    _check_gate("lr", lr, q.shape[:3], low=0.0, high=None, values=values)
    _check_gate("momentum", momentum, q.shape[:3], low=0.0, high=1.0, values=values)
    _check_gate("decay", decay, q.shape[:3], low=0.0, high=1.0, values=values)
    check_int("chunk_size", chunk_size, 1)
    check_int("omega_window", omega_window, 1)
    if omega_gate is None and omega_window > 1:
        raise ValueError(f"omega_gate [B, T, H, {omega_window}] is required when omega_window > 1")
    if omega_gate is not None:
        _check_gate(
            "omega_gate", omega_gate, (*q.shape[:3], omega_window), low=0.0, high=1.0, values=values
        )
    _check_state(memory, state, q.shape[0], q.shape[2], chunk_size, omega_window)


def _check_modes(read, impl) -> None:
    if read not in READ_MODES:
        raise ValueError(f"read must be one of {READ_MODES}, got {read!r}")
    if impl not in (*IMPLS, "auto"):
        raise ValueError(f"impl must be one of {(*IMPLS, 'auto')}, got {impl!r}")


def _check_gate(name, gate, shape, low, high, values) -> None:
    if not isinstance(gate, mx.array) or tuple(gate.shape) != tuple(shape):
        got = list(gate.shape) if isinstance(gate, mx.array) else type(gate).__name__
        raise ValueError(f"{name} must have shape {list(shape)}, got {got}")
    if not values:
        return
    in_range = mx.isfinite(gate) & (gate >= low)
    if high is not None:
        in_range = in_range & (gate <= high)
    if not _all(in_range):
        bounds = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must lie in {bounds} (finite, not NaN)")


def _check_state(memory, state, batch, heads, chunk_size, omega_window) -> None:
    if not isinstance(state, MemoryState):
        raise ValueError("state must be an MLX MemoryState (start one with memory.initial_state)")
    check_state_layout(memory, state, batch, heads, chunk_size, omega_window)
