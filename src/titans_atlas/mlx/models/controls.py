"""Controls without memory in MLX: sliding-window attention (SWA) and a full-attention
Transformer. Block: x + Attn(norm(x)), then FFN; the block state is the KV cache."""

from __future__ import annotations

from ...common.blocks import AttentionFlow, SlidingWindowFlow
from .backbone import LanguageModel, register
from .blocks import Built


class AttentionBlock(AttentionFlow, Built):
    """``common/blocks.py``'s ``AttentionFlow`` built from MLX parts."""


class SlidingWindowBlock(SlidingWindowFlow, AttentionBlock):
    """``common/blocks.py``'s ``SlidingWindowFlow`` on the attention block."""


@register("swa")
class SWA(LanguageModel):
    block_class = SlidingWindowBlock


@register("transformer")
class Transformer(LanguageModel):
    block_class = AttentionBlock
