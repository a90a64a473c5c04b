"""MAL, memory as a layer (Titans eqs. 29-31): the memory layer, then sliding-window
attention over its output -- sequential, not a sum.

Block: x + Mem(norm(x)); then x + SWA(norm(x)); then FFN (each sublayer pre-norm residual,
so the attention reads the memory's output).
"""

from __future__ import annotations

from ..common.blocks import MALFlow
from .backbone import LanguageModel, register
from .blocks import Built, HybridState


class MALBlock(MALFlow, Built):
    """``common/blocks.py``'s ``MALFlow`` (shared with the MLX mirror) built from torch parts."""

    state_class = HybridState


@register("mal")
class MAL(LanguageModel):
    block_class = MALBlock
