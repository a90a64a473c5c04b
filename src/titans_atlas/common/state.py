"""The layout of a memory stream's state (docs/memory.md, section 6), for both backends:
``ops/state.py`` (torch tensors) and ``mlx/ops/state.py`` (MLX arrays) subclass it, so the
fields, their meaning and a state's walk are written once.

Axes: B batch, H heads, Dk key width, C chunk size, c Omega window.
Weights and momenta are dicts keyed like ``memory.init_weights()``, each ``[B, H, ...]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any

Array = Any  # a torch.Tensor or an mlx.core.array


@dataclass
class MemoryStateLayout:
    """Everything needed to continue a memory stream exactly.

    Attributes:
        weights: current weights W_t, name -> ``[B, H, ...]``.
        momentum: current momentum S_t, same keys and shapes as ``weights``.
        base: weights at the start of the current chunk (the gradient base point); set only
            when the stream stands inside a chunk (``position % chunk_size != 0``).
        position: tokens seen since the stream started (absolute t of the next token).
        halo_keys, halo_values: the last ``omega_window - 1`` keys/values ``[B, H, c-1, D]``
            (zeros before the stream start); ``None`` while no Omega window is in use.
        chunk_size, omega_window: fixed by the first scan; later scans must agree because the
            chunk grid is anchored at the stream start.
    """

    weights: dict[str, Array]
    momentum: dict[str, Array]
    base: dict[str, Array] | None = None
    position: int = 0
    halo_keys: Array | None = None
    halo_values: Array | None = None
    chunk_size: int | None = None
    omega_window: int | None = None

    @property
    def batch_size(self) -> int:
        return next(iter(self.weights.values())).shape[0]

    @property
    def num_heads(self) -> int:
        return next(iter(self.weights.values())).shape[1]

    def chunk_base(self) -> dict[str, Array]:
        """Gradient base point for the next token: ``base`` inside a chunk, else ``weights``."""
        return self.base if self.base is not None else self.weights

    def advanced(
        self, length: int, weights: dict, momentum: dict, base: dict, halos: tuple, options: Any
    ) -> MemoryStateLayout:
        """The state ``length`` tokens on, as a scan leaves it: the new weights and momentum,
        the chunk base kept only inside a chunk, the Omega halos ``(keys, values)``, and the
        chunk grid of ``options`` (a ``ScanOptions``)."""
        end = self.position + length
        return replace(
            self,
            weights=weights,
            momentum=momentum,
            base=base if end % options.chunk_size else None,
            position=end,
            halo_keys=halos[0],
            halo_values=halos[1],
            chunk_size=options.chunk_size,
            omega_window=options.omega_window,
        )


def map_leaves(obj: Any, fn: Callable[[Array], Any], leaf: type) -> Any:
    """Apply ``fn`` to every ``leaf`` (a backend's array type) inside nested dataclasses,
    dicts, lists and tuples: the one walker for every state object of either backend."""
    if isinstance(obj, leaf):
        return fn(obj)
    if is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: map_leaves(getattr(obj, f.name), fn, leaf) for f in fields(obj)}
        return replace(obj, **changes)
    if isinstance(obj, dict):
        return {key: map_leaves(value, fn, leaf) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(map_leaves(value, fn, leaf) for value in obj)
    return obj
