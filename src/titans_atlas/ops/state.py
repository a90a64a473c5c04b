"""The explicit state of a memory stream (docs/memory.md, section 6).

Axes: B batch, H heads, Dk key width, C chunk size, c Omega window.
Weights and momenta are dicts keyed like ``memory.init_weights()``, each ``[B, H, ...]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any

import torch

TensorDict = dict[str, torch.Tensor]


@dataclass
class MemoryState:
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

    weights: TensorDict
    momentum: TensorDict
    base: TensorDict | None = None
    position: int = 0
    halo_keys: torch.Tensor | None = None
    halo_values: torch.Tensor | None = None
    chunk_size: int | None = None
    omega_window: int | None = None

    @property
    def batch_size(self) -> int:
        return next(iter(self.weights.values())).shape[0]

    @property
    def num_heads(self) -> int:
        return next(iter(self.weights.values())).shape[1]

    def chunk_base(self) -> TensorDict:
        """Gradient base point for the next token: ``base`` inside a chunk, else ``weights``."""
        return self.base if self.base is not None else self.weights

    def map_tensors(self, fn: Callable[[torch.Tensor], Any]) -> MemoryState:
        """A copy with ``fn`` applied to every tensor (e.g. ``detach``, ``.to(device)``)."""
        return map_tensors(self, fn)

    def detach(self) -> MemoryState:
        """Cut the autograd graph (truncated backpropagation through time)."""
        return self.map_tensors(torch.Tensor.detach)


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply ``fn`` to every tensor inside nested dataclasses, dicts, lists and tuples (the
    one walker for every state object: MemoryState here, ModelState in models/backbone.py)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if is_dataclass(obj) and not isinstance(obj, type):
        return replace(obj, **{f.name: map_tensors(getattr(obj, f.name), fn) for f in fields(obj)})
    if isinstance(obj, dict):
        return {key: map_tensors(value, fn) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(map_tensors(value, fn) for value in obj)
    return obj


def last_tokens(halo: torch.Tensor, x: torch.Tensor, window: int) -> torch.Tensor | None:
    """The Omega halo after ``x`` ``[B, H, T, D]``: the last c - 1 tokens of halo ++ x, copied
    so the state does not pin the whole input (None when there is no window)."""
    if window == 1:
        return None
    return torch.cat([halo, x], dim=2)[:, :, x.shape[2] :].clone()
