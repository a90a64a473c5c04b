"""The explicit state of a memory stream (docs/memory.md), in MLX.

Axes: B batch, H heads, Dk key width, C chunk size, c Omega window.
Weights and momenta are dicts keyed like ``memory.init_weights()``, each ``[B, H, ...]``.
Mirrors ``titans_atlas.ops.state``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx

from ...common.state import MemoryStateLayout, map_leaves

ArrayDict = dict[str, mx.array]


class MemoryState(MemoryStateLayout):
    """Everything needed to continue a memory stream exactly, as MLX arrays (the fields:
    ``common/state.py``)."""

    def map_arrays(self, fn: Callable[[mx.array], Any]) -> MemoryState:
        """A copy with ``fn`` applied to every array (e.g. ``mx.stop_gradient``)."""
        return map_arrays(self, fn)


def map_arrays(obj: Any, fn: Callable[[mx.array], Any]) -> Any:
    """Apply ``fn`` to every array inside nested dataclasses, dicts, lists and tuples (the one
    walker for every MLX state object)."""
    return map_leaves(obj, fn, mx.array)


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
