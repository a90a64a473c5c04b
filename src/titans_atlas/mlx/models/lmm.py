"""LMM in MLX: the long-term memory alone. Block: x + Mem(norm(x)), then FFN."""

from __future__ import annotations

from ...common.blocks import MemoryFlow
from .backbone import LanguageModel, register
from .blocks import Built


class MemoryBlock(MemoryFlow, Built):
    """``common/blocks.py``'s ``MemoryFlow`` built from MLX parts."""


@register("lmm")
class LMM(LanguageModel):
    """Memory layers and feed-forwards only; no attention."""

    block_class = MemoryBlock
