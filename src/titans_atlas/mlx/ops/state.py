"""The explicit state of a memory stream (docs/memory.md), in MLX.

Axes: B batch, H heads, Dk key width, C chunk size, c Omega window.
Weights and momenta are dicts keyed like ``memory.init_weights()``, each ``[B, H, ...]``.
Mirrors ``titans_atlas.ops.state``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any

import mlx.core as mx

ArrayDict = dict[str, mx.array]


@dataclass
class MemoryState:
    """Everything needed to continue a memory stream exactly (see the torch ``MemoryState``).

    Attributes:
        weights: current weights W_t, name -> ``[B, H, ...]``.
        momentum: current momentum S_t, same keys and shapes as ``weights``.
        base: weights at the start of the current chunk; set only inside a chunk.
        position: tokens seen since the stream started.
        halo_keys, halo_values: the last ``omega_window - 1`` keys/values ``[B, H, c-1, D]``.
        chunk_size, omega_window: fixed by the first scan.
    """

    weights: ArrayDict
    momentum: ArrayDict
    base: ArrayDict | None = None
    position: int = 0
    halo_keys: mx.array | None = None
    halo_values: mx.array | None = None
    chunk_size: int | None = None
    omega_window: int | None = None

    @property
    def batch_size(self) -> int:
        return next(iter(self.weights.values())).shape[0]

    @property
    def num_heads(self) -> int:
        return next(iter(self.weights.values())).shape[1]

    def chunk_base(self) -> ArrayDict:
        """Gradient base point for the next token: ``base`` inside a chunk, else ``weights``."""
        return self.base if self.base is not None else self.weights

    def map_arrays(self, fn: Callable[[mx.array], Any]) -> MemoryState:
        """A copy with ``fn`` applied to every array (e.g. ``mx.stop_gradient``)."""
        return map_arrays(self, fn)


def map_arrays(obj: Any, fn: Callable[[mx.array], Any]) -> Any:
    """Apply ``fn`` to every array inside nested dataclasses, dicts, lists and tuples (the one
    walker for every MLX state object)."""
    if isinstance(obj, mx.array):
        return fn(obj)
    if is_dataclass(obj) and not isinstance(obj, type):
        return replace(obj, **{f.name: map_arrays(getattr(obj, f.name), fn) for f in fields(obj)})
    if isinstance(obj, dict):
        return {key: map_arrays(value, fn) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(map_arrays(value, fn) for value in obj)
    return obj


def arrays_of(obj: Any) -> list[mx.array]:
    """Every array inside a (nested) state, e.g. for ``mx.eval``."""
    found: list[mx.array] = []
    map_arrays(obj, found.append)
    return found


def last_tokens(halo: mx.array, x: mx.array, window: int) -> mx.array | None:
    """The Omega halo after ``x`` ``[B, H, T, D]``: the last c - 1 tokens of halo ++ x
    (None when there is no window)."""
    if window == 1:
        return None
    return mx.concatenate([halo, x], axis=2)[:, :, x.shape[2] :]
