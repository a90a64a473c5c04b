"""MAG, memory as a gate (Titans eqs. 26-28).

Block: h = norm(x); y = SWA([persistent ; h]); m = Mem(h) (per-token read);
x + RMSNorm(y) * sigmoid(RMSNorm(m)); then FFN. The two branches run side by side.
"""

from __future__ import annotations

from ..common.blocks import MAGFlow
from .backbone import LanguageModel, register
from .blocks import Built, HybridState


class MAGBlock(MAGFlow, Built):
    """``common/blocks.py``'s ``MAGFlow`` (shared with the MLX mirror) built from torch parts."""

    state_class = HybridState


@register("mag")
class MAG(LanguageModel):
    block_class = MAGBlock
