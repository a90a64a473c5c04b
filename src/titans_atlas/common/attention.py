"""What the torch attention and feed-forward (``layers/attention.py``, ``layers/basic.py``)
and their MLX mirrors share beyond the array code: which keys a query may see
(``VisibilityRule``, a rule on absolute positions that works on torch tensors and numpy arrays
alike), the query block size, and the layers' construction (``AttentionLayout``,
``SwiGLULayout``): the same parameter names and shapes on both sides are what lets a
checkpoint written by one load into the other.

Axes: T tokens, D model width, H heads, P persistent tokens, L cache slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..validation import check_heads

QUERY_BLOCK = 512  # queries per SDPA call: bounds the mask and score memory on long inputs


@dataclass(frozen=True)
class VisibilityRule:
    """Which earlier tokens a query sees: all (None, None), a window, or its segment."""

    window: int | None = None
    segment: int | None = None

    def allowed(self, query_pos: Any, key_pos: Any) -> Any:
        """Boolean ``[Tq, Tk]``: may the query at ``query_pos[i]`` attend ``key_pos[j]``?"""
        q, k = query_pos[:, None], key_pos[None, :]
        ok = k <= q
        if self.window is not None:
            ok = ok & (q - k < self.window)
        if self.segment is not None:
            ok = ok & (q // self.segment == k // self.segment)
        return ok

    def first_visible(self, position: int) -> int:
        """Earliest key position a query at ``position`` or later may still see."""
        first = 0
        if self.window is not None:
            first = max(first, position - self.window + 1)
        if self.segment is not None:
            first = max(first, position - position % self.segment)
        return first

    @property
    def capacity(self) -> int | None:
        """Cache slots per source: earlier tokens a query may see (None: unbounded)."""
        spans = [span - 1 for span in (self.window, self.segment) if span is not None]
        return min(spans) if spans else None


class AttentionLayout:
    """The attention's construction, once for both backends (mixed in before ``nn.Module``):
    ``to_qkv`` ``[3D <- D]`` and ``to_out`` ``[D <- D]``, both without bias, made by the
    backend's ``linear`` class; the backend's ``_init_parameters`` then adds the ``P``
    persistent tokens and draws the weights."""

    linear: Any  # the backend's nn.Linear

    def __init__(
        self,
        dim: int,
        num_heads: int,
        rule: VisibilityRule,
        num_persistent: int = 0,
        rope_base: float = 10000.0,
    ) -> None:
        super().__init__()
        check_heads(dim, num_heads)
        self.num_heads, self.rule, self.rope_base = num_heads, rule, rope_base
        self.to_qkv = self.linear(dim, 3 * dim, bias=False)
        self.to_out = self.linear(dim, dim, bias=False)
        self._init_parameters(dim, num_persistent)

    def _init_parameters(self, dim: int, num_persistent: int) -> None:
        raise NotImplementedError


class SwiGLULayout:
    """Llama's feed-forward ``down(silu(gate(x)) * up(x))``, ``[B, T, D] -> [B, T, D]``: its
    bias-free projections ``gate``, ``up`` ``[Dh <- D]`` and ``down`` ``[D <- Dh]`` made by
    the backend's ``linear`` class, then drawn by the backend's ``_init_parameters``."""

    linear: Any  # the backend's nn.Linear

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.gate = self.linear(dim, hidden_dim, bias=False)
        self.up = self.linear(dim, hidden_dim, bias=False)
        self.down = self.linear(hidden_dim, dim, bias=False)
        self._init_parameters()

    def _init_parameters(self) -> None:
        raise NotImplementedError
