"""MAG in MLX, memory as a gate (Titans eqs. 26-28).

Block: h = norm(x); y = SWA([persistent ; h]); m = Mem(h); x + RMSNorm(y) * sigmoid(RMSNorm(m));
then FFN.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...common.blocks import MAGFlow
from ..layers.attention import KVCache
from ..layers.neural_memory import MemoryLayerState
from .backbone import LanguageModel, register
from .blocks import Built


@dataclass
class HybridState:
    """The stream of a block with attention and a memory side by side (MAG) or in a row (MAL)."""

    attn: KVCache | None = None
    memory: MemoryLayerState | None = None


class MAGBlock(MAGFlow, Built):
    state_class = HybridState


@register("mag")
class MAG(LanguageModel):
    block_class = MAGBlock
