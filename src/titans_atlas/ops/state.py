"""The explicit state of a memory stream (docs/memory.md, section 6).

Axes: B batch, H heads, Dk key width, C chunk size, c Omega window.
Weights and momenta are dicts keyed like ``memory.init_weights()``, each ``[B, H, ...]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..common.state import MemoryStateLayout, map_leaves

TensorDict = dict[str, torch.Tensor]


class MemoryState(MemoryStateLayout):
    """Everything needed to continue a memory stream exactly, as torch tensors (the fields:
    ``common/state.py``)."""

    def map_tensors(self, fn: Callable[[torch.Tensor], Any]) -> MemoryState:
        """A copy with ``fn`` applied to every tensor (e.g. ``detach``, ``.to(device)``)."""
        return map_tensors(self, fn)

    def detach(self) -> MemoryState:
        """Cut the autograd graph (truncated backpropagation through time)."""
        return self.map_tensors(torch.Tensor.detach)


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply ``fn`` to every tensor inside nested dataclasses, dicts, lists and tuples (the
    one walker for every state object: MemoryState here, ModelState in models/state.py)."""
    return map_leaves(obj, fn, torch.Tensor)


def last_tokens(halo: torch.Tensor, x: torch.Tensor, window: int) -> torch.Tensor | None:
    """The Omega halo after ``x`` ``[B, H, T, D]``: the last c - 1 tokens of halo ++ x, copied
    so the state does not pin the whole input (None when there is no window)."""
    if window == 1:
        return None
    return torch.cat([halo, x], dim=2)[:, :, x.shape[2] :].clone()
