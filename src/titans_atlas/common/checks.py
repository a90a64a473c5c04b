"""Input checks of ``memory_scan`` that read only shapes, for both backends (``ops/checks.py``,
``mlx/ops/scan.py``): a ValueError naming the argument.

Axes: B batch, T tokens, H heads, Dk key width, Dv value width.
"""

from __future__ import annotations

from typing import Any


def check_qkv_shapes(memory: Any, q: Any, k: Any, v: Any) -> None:
    """q, k ``[B, T, H, Dk]`` alike, v ``[B, T, H, Dv]``, with the memory's widths Dk, Dv."""
    batch, length, heads, _ = q.shape
    if k.shape != q.shape:
        raise ValueError(f"k must have q's shape {list(q.shape)}, got {list(k.shape)}")
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(f"v must be [{batch}, {length}, {heads}, Dv], got {list(v.shape)}")
    if q.shape[-1] != memory.dim_in:
        raise ValueError(f"q/k width {q.shape[-1]} != memory.dim_in {memory.dim_in}")
    if v.shape[-1] != memory.dim_out:
        raise ValueError(f"v width {v.shape[-1]} != memory.dim_out {memory.dim_out}")


def check_state_layout(
    memory: Any, state: Any, batch: int, heads: int, chunk_size: int, omega_window: int
) -> None:
    """A stream state that fits the inputs and the scan's chunk grid: the memory's weights
    and momentum (and base, inside a chunk) for ``batch`` x ``heads``, a position >= 0, and
    the chunk size and Omega window it started with (the grid is anchored at the start)."""
    memory.check_weights(state.weights, batched=True, name="state.weights")
    memory.check_weights(state.momentum, batched=True, name="state.momentum")
    if (state.batch_size, state.num_heads) != (batch, heads):
        raise ValueError(
            f"state is for batch {state.batch_size} x heads {state.num_heads}, "
            f"inputs are batch {batch} x heads {heads}"
        )
    position, size, window = state.position, chunk_size, omega_window
    if isinstance(position, bool) or not isinstance(position, int) or position < 0:
        raise ValueError(f"state.position must be an integer >= 0, got {position!r}")
    for name in ("chunk_size", "omega_window"):  # a string "16" read as 16 was "16 != 16"
        value = getattr(state, name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(
                f"state.{name} must be None or an integer >= 1, "
                f"got {value!r} ({type(value).__name__})"
            )
    if state.chunk_size is not None and state.chunk_size != size and position > 0:
        raise ValueError(
            f"chunk_size={size} differs from the stream's chunk_size={state.chunk_size} "
            "(the chunk grid is anchored at the stream start)"
        )
    if state.omega_window is not None and state.omega_window != window and position > 0:
        raise ValueError(f"omega_window={window} differs from the stream's {state.omega_window}")
    if position % size and state.base is None:
        raise ValueError("state stands inside a chunk but has no base weights (state.base)")
    if state.base is not None:
        memory.check_weights(state.base, batched=True, name="state.base")
    # every tensor for the same streams: a momentum [1, H, ...] beside weights [B, H, ...]
    # was broadcast by the per-token loop and a bmm error in the chunked form
    for group in ("weights", "momentum", "base"):
        for key, w in (getattr(state, group) or {}).items():
            if tuple(w.shape[:2]) != (batch, heads):
                raise ValueError(
                    f"state.{group}[{key!r}] must lead with [B, H] = [{batch}, {heads}], "
                    f"got {list(w.shape)}"
                )
    if position > 0 and state.halo_keys is not None:  # at position 0 the halo is unused
        widths = (("halo_keys", memory.dim_in), ("halo_values", memory.dim_out))
        for name, width in widths:
            halo, want = getattr(state, name), [batch, heads, window - 1, width]
            if halo is None or list(halo.shape) != want:
                got = None if halo is None else list(halo.shape)
                raise ValueError(f"state.{name} must be {want} (the last c - 1 tokens), got {got}")


def check_decay_target(memory: Any, target: Any, batch: int, heads: int, is_array: type) -> None:
    """``decay_to``: the memory's weights (arrays of type ``is_array``), per head
    ``[H, ...]`` or per sample ``[B, H, ...]``."""
    batched = isinstance(target, dict) and any(
        isinstance(w, is_array) and w.ndim == 4 for w in target.values()
    )
    memory.check_weights(target, batched=batched, name="decay_to")
    lead = (batch, heads) if batched else (heads,)
    for key, w in target.items():
        if tuple(w.shape[:-2]) != lead:
            want = "B, H" if batched else "H"
            raise ValueError(
                f"decay_to[{key!r}] must lead with [{want}] = {list(lead)}, got {list(w.shape)}"
            )


def diverged_message(what: str) -> str:
    """The error of a checked scan call whose finite inputs gave non-finite ``what`` (the
    reads, or a weight or momentum of the new state): both backends raise it."""
    return (
        f"the memory diverged: {what} holds NaN or inf although every input was finite: the "
        "inner step lr is too large for these keys (bound it, as the layer's lr_max does, or "
        "pass max_grad_norm)"
    )
