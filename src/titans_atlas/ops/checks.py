"""Input checks of ``memory_scan``: a ValueError that names the offending argument.

Axes: B batch, T tokens, H heads, Dk key/query width, Dv value width, c Omega window.

Two kinds: structure checks (types, shapes, dtypes, the chunk grid) read only metadata and
always run; value checks (NaN, inf, gate ranges) read the tensors, which on an accelerator
means a host-device synchronisation (and a graph break under ``torch.compile``), so they run
only when ``values`` is True: ``memory_scan(validate=...)``, else the default set by
``validating(...)`` (True), and never while ``torch.compile`` traces. They are collected as
flags (``Faults``) and read with one sync per call, not one per tensor.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..common.checks import (
    check_decay_target,
    check_qkv_shapes,
    check_state_layout,
    diverged_message,
)
from ..validation import check_choice
from .memory_models import MemoryModel
from .options import ScanInputs, ScanOptions
from .state import MemoryState

# The default of memory_scan's ``validate``: a context variable, so a training loop can turn
# the value checks off for its block (``with validating(False): ...``) without a global flag
# leaking into other threads or tasks.
_VALIDATE_DEFAULT: ContextVar[bool] = ContextVar("titans_atlas_validate", default=True)


@contextmanager
def validating(enabled: bool) -> Iterator[None]:
    """Within the block, ``memory_scan(validate=None)`` runs its value checks iff ``enabled``."""
    check_choice("enabled", enabled, (False, True))
    token = _VALIDATE_DEFAULT.set(enabled)
    try:
        yield
    finally:
        _VALIDATE_DEFAULT.reset(token)


def value_checks_enabled(validate: bool | None = None) -> bool:
    """Whether the value checks run: never while ``torch.compile`` traces (they would sync and
    break the graph), else ``validate``, else the ``validating`` default (True)."""
    if torch.compiler.is_compiling():
        return False
    check_choice("validate", validate, (None, False, True))
    return _VALIDATE_DEFAULT.get() if validate is None else validate


# name -> (low, high) of each gate; None = unbounded above.
GATE_RANGES = {"lr": (0.0, None), "momentum": (0.0, 1.0), "decay": (0.0, 1.0), "omega": (0.0, 1.0)}


class Faults:
    """The value checks of one call: each ``add`` keeps a 0-d "bad" flag on the device and the
    error it stands for; ``raise_first`` reads all flags with one host sync and raises the
    first fault in the order added (the order the checks ran in when each synced alone)."""

    def __init__(self) -> None:
        self.flags: list[torch.Tensor] = []
        self.messages: list[str] = []

    def add(self, bad: torch.Tensor, message: str) -> None:
        device = self.flags[0].device if self.flags else bad.device
        self.flags.append(bad.to(device))  # inputs on several devices: the scan refuses later
        self.messages.append(message)

    def non_finite(self, name: str, x: torch.Tensor) -> None:
        self.add(~torch.isfinite(x).all(), f"{name} contains NaN or inf")

    def raise_first(self) -> None:
        if not self.flags:
            return
        bad = torch.stack(self.flags)
        if bool(bad.any()):  # the one sync; finding which costs a second, only on failure
            raise ValueError(self.messages[int(bad.nonzero()[0, 0])])


def check_scan_inputs(inputs: ScanInputs, *, values: bool) -> Faults | None:
    """Raise ValueError naming the argument for any structure fault; with ``values``, return
    the finiteness and range checks as ``Faults`` for the caller to raise after adding the
    outputs' (``check_scan_outputs``): one host sync for the whole call."""
    memory, q, k, v, gates, state, options = inputs
    if not isinstance(memory, MemoryModel):
        raise ValueError(f"memory must be a MemoryModel, got {type(memory).__name__}")
    if isinstance(q, torch.Tensor):  # first: a value check would copy across devices
        _check_devices(q, k, v, gates, state)
    faults = Faults() if values else None
    _check_qkv(memory, q, k, v, faults)
    batch, length, heads, _ = q.shape
    window = options.omega_window
    if gates.omega is None and window > 1:
        raise ValueError(f"omega_gate [B, T, H, {window}] is required when omega_window > 1")
    for name in GATE_RANGES:
        gate = getattr(gates, name)
        if gate is not None:
            shape = (batch, length, heads) + ((window,) if name == "omega" else ())
            _check_gate(name, gate, shape, faults)
    if gates.decay_to is not None:
        _check_decay_target(memory, gates.decay_to, batch, heads, faults)
    _check_state(memory, state, batch, heads, options, faults)
    return faults


def _check_devices(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gates, state) -> None:
    """Every tensor on q's device, and a real one: a mix was a device error deep in the
    scan, and a meta tensor (no data) an "unsupported scalarType" from the recurrence."""
    if q.device.type == "meta":
        raise ValueError("q is on the meta device: memory_scan needs tensors with data")
    tensors = {"k": k, "v": v, "lr": gates.lr, "momentum": gates.momentum}
    tensors.update(decay=gates.decay, omega_gate=gates.omega)
    if isinstance(gates.decay_to, dict):  # not a dict: _check_decay_target says so
        tensors.update({f"decay_to[{key!r}]": w for key, w in gates.decay_to.items()})
    for group in ("weights", "momentum", "base"):
        part = getattr(state, group, None)
        if isinstance(part, dict):  # else the state checks below name it
            tensors.update({f"state.{group}[{key!r}]": w for key, w in part.items()})
    tensors.update(
        {f"state.{name}": getattr(state, name, None) for name in ("halo_keys", "halo_values")}
    )
    for name, x in tensors.items():
        if isinstance(x, torch.Tensor) and x.device != q.device:
            raise ValueError(f"{name} is on {x.device}, q on {q.device}: put them on one device")


def check_scan_outputs(faults: Faults, y: torch.Tensor, state: MemoryState) -> None:
    """Add the outputs' checks to the inputs' and raise the first fault, with one sync. Finite
    inputs can still diverge (an unbounded inner step ``lr`` on large keys): such a call
    raises, rather than hand inf or NaN to the caller to find later. A fault of the inputs
    comes first, so a NaN input is named as such, not as a divergence."""
    faults.add(~torch.isfinite(y).all(), diverged_message("the reads y"))
    for part, tensors in (("weight", state.weights), ("momentum", state.momentum)):
        for name, w in tensors.items():
            faults.add(~torch.isfinite(w).all(), diverged_message(f"the new {part} {name!r}"))
    faults.raise_first()


def _check_decay_target(memory, target, batch: int, heads: int, faults: Faults | None) -> None:
    """``decay_to``: the memory's weights, per head ``[H, ...]`` or per sample ``[B, H, ...]``."""
    check_decay_target(memory, target, batch, heads, torch.Tensor)
    if faults is not None:
        for key, w in target.items():
            faults.non_finite(f"decay_to[{key!r}]", w)


def _check_qkv(memory, q, k, v, faults: Faults | None) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.ndim != 4:
            got = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} must be a [B, T, H, D] tensor, got {got}")
        if not x.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {x.dtype}")
        if faults is not None:
            faults.non_finite(name, x)
    check_qkv_shapes(memory, q, k, v)


def _check_gate(name: str, gate, shape: tuple[int, ...], faults: Faults | None) -> None:
    public = "omega_gate" if name == "omega" else name  # the keyword the caller used
    if not isinstance(gate, torch.Tensor) or tuple(gate.shape) != tuple(shape):
        got = list(gate.shape) if isinstance(gate, torch.Tensor) else type(gate).__name__
        raise ValueError(f"{public} must have shape {list(shape)}, got {got}")
    if not gate.is_floating_point():
        raise ValueError(f"{public} must be a floating-point tensor, got {gate.dtype}")
    if faults is None:
        return
    low, high = GATE_RANGES[name]
    outside = ~torch.isfinite(gate) | (gate < low)
    if high is not None:
        outside |= gate > high
    bounds = f"[{low}, {high}]" if high is not None else f">= {low}"
    faults.add(outside.any(), f"{public} must lie in {bounds} (finite, not NaN)")


def _check_state(memory, state, batch, heads, options: ScanOptions, faults: Faults | None) -> None:
    if not isinstance(state, MemoryState):
        raise ValueError("state must be a MemoryState (start one with memory.initial_state)")
    check_state_layout(memory, state, batch, heads, options.chunk_size, options.omega_window)
    _check_state_tensors(state, faults)


def _check_state_tensors(state: MemoryState, faults: Faults | None) -> None:
    """One floating dtype for weights, momentum and base (the recurrence runs in it), and,
    with ``faults``, finite values everywhere (the halo too, once the stream has started)."""
    dtype = next(iter(state.weights.values())).dtype
    named = [
        (f"state.{group}[{key!r}]", x)
        for group in ("weights", "momentum", "base")
        for key, x in (getattr(state, group) or {}).items()
    ]
    for name, x in named:
        if not x.is_floating_point():
            raise ValueError(f"{name} must be floating point, got {x.dtype}")
        if x.dtype != dtype:
            raise ValueError(f"{name} has dtype {x.dtype}, the state's weights {dtype}")
    if faults is None:
        return
    if state.position > 0:  # at position 0 the halo is ignored (all zeros before the stream)
        named += [(f"state.{n}", getattr(state, n)) for n in ("halo_keys", "halo_values")]
    for name, x in named:
        if x is not None:
            faults.non_finite(name, x)


class CountSyncs(TorchDispatchMode):
    """Counts reads of a tensor's value into Python (``.item()``, ``bool(t)``, ``int(t)``:
    aten's ``_local_scalar_dense``), each a host sync on a GPU: ``with CountSyncs() as
    syncs: ...; syncs.count``. Other syncs (``nonzero``, ``.cpu()``) are not counted; the
    hot path makes none. Used by the tests and ``benchmarks/host_syncs.py``."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func.overloadpacket is torch.ops.aten._local_scalar_dense
        return func(*args, **(kwargs or {}))
