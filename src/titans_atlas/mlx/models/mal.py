"""MAL in MLX, memory as a layer (Titans eqs. 29-31): the memory layer, then sliding-window
attention over its output. Block: x + Mem(norm(x)); then x + SWA(norm(x)); then FFN."""

from __future__ import annotations

from ...common.blocks import MALFlow
from .backbone import LanguageModel, register
from .blocks import Built
from .mag import HybridState


class MALBlock(MALFlow, Built):
    state_class = HybridState


@register("mal")
class MAL(LanguageModel):
    block_class = MALBlock
