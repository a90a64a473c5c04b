"""MAC in MLX, memory as context (Titans eqs. 21-25; mirrors ``titans_atlas.models.mac``).

For segment s of ``window`` tokens, with M_{s-1} the memory after the previous segment:
h = M*_{s-1}(q(x_s)) (read only); y = Attn([persistent ; h ; x_s]); M_s = M_{s-1} updated with
norm(y); o = y (x) M*_s(y) per token; x + gate(y, m); then FFN. A call may start or end
anywhere inside a segment.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import mlx.core as mx

from ...common.blocks import MACSegmentFlow
from ..layers.attention import KVCache
from ..layers.neural_memory import MemoryLayerState
from .backbone import LanguageModel, register
from .blocks import Built


@dataclass
class MACState:
    """A MAC block's stream: the memory, the segment's read-only weights M_{s-1}, the conv
    cache of the retrieval queries and the segment's KV cache."""

    memory: MemoryLayerState
    segment_weights: dict[str, mx.array] | None = None
    retrieve_conv: mx.array | None = None
    attn: KVCache | None = None


class MACBlock(MACSegmentFlow, Built):
    state_class = MACState

    def __call__(self, x, state: MACState | None, position: int):
        state = state or MACState(memory=self.memory.initial_state(x.shape[0]))
        pieces, pos = [], position
        for length in self._segment_lengths(x.shape[1], position):
            if pos % self.segment == 0 or state.segment_weights is None:
                state = replace(state, segment_weights=state.memory.memory.weights)  # M_{s-1}
            piece, state = self._segment(x[:, pos - position : pos - position + length], state, pos)
            pieces.append(piece)
            pos += length
        return self.ffn(mx.concatenate(pieces, axis=1)), state


@register("mac")
class MAC(LanguageModel):
    block_class = MACBlock
