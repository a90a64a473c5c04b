"""LMM: the long-term memory alone (Titans Section 4). Block: x + Mem(norm(x)), then FFN."""

from __future__ import annotations

from ..common.blocks import MemoryFlow
from ..layers.neural_memory import MemoryLayerState
from .backbone import LanguageModel, register
from .blocks import Built


class MemoryBlock(MemoryFlow, Built):
    """``common/blocks.py``'s ``MemoryFlow`` (shared with the MLX mirror) built from torch
    parts."""

    state_class = MemoryLayerState


@register("lmm")
class LMM(LanguageModel):
    """Memory layers and feed-forwards only; no attention."""

    block_class = MemoryBlock
