"""MAC, memory as context (Titans eqs. 21-25).

The stream is cut into segments of ``window`` tokens. For segment s, with M_{s-1} the memory
after the previous segment:

    h = M*_{s-1}(q(x_s))                  read only, no update              (eq. 21)
    y = Attn([persistent ; h ; x_s])      causal inside the segment: x_i sees h_j, x_j, j <= i
    M_s = M_{s-1} updated with y          keys/values from y, chunked       (eq. 24)
    o = y (x) M*_s(y)                     per-token read after its own write (eq. 25)

Block: h_in = norm(x); the memory writes and reads norm(y) (pre-norm like every sublayer: the
raw attention output is ~1e-3 at initialisation, too small to write anything the initial
weights would not drown); x + gate(y, m); then FFN. Segments are processed in order (each needs
the memory the previous one left), so a call may start or end anywhere inside a segment.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from ..common.blocks import MACSegmentFlow
from ..layers.attention import KVCache
from ..layers.neural_memory import MemoryLayerState
from .backbone import LanguageModel, register
from .blocks import Built, FieldAccess


@dataclass
class MACState(FieldAccess):
    """A MAC block's stream: the memory layer's state, M_{s-1} (the memory weights when the
    current segment began, ``[B, H, ...]`` by name), the segment's KV cache (tokens and
    retrieved memory tokens) and the conv cache of the retrieval queries."""

    # the KV cache holds two sources: the retrieved memory tokens, then the tokens
    cache_sources: ClassVar[int] = 2

    memory: MemoryLayerState
    segment_weights: dict[str, torch.Tensor]
    attn: KVCache | None = None
    retrieve_conv: torch.Tensor | None = None


class MACBlock(MACSegmentFlow, Built):
    """``common/blocks.py``'s ``MACSegmentFlow`` (shared with the MLX mirror) built from torch
    parts, and the walk over the segments a call touches."""

    state_class = MACState

    def forward(
        self, x: torch.Tensor, state: MACState | None, position: int
    ) -> tuple[torch.Tensor, MACState]:
        if state is None:
            memory = self.memory.initial_state(x.shape[0])
            state = MACState(memory=memory, segment_weights=memory.memory.weights)
        pieces, pos = [], position
        for part in x.split(self._segment_lengths(x.shape[1], position), dim=1):
            if pos % self.segment == 0:  # a new segment reads M_{s-1}: the memory as it is now
                state = replace(state, segment_weights=state.memory.memory.weights)
            piece, state = self._segment(part, state, pos)
            pieces.append(piece)
            pos += part.shape[1]
        return self.ffn(torch.cat(pieces, dim=1)), state


@register("mac")
class MAC(LanguageModel):
    block_class = MACBlock
