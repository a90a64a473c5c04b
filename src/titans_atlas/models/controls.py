"""Controls without memory: sliding-window attention (SWA) and a full-attention Transformer
(Transformer++ in the papers). Block: x + Attn(norm(x)), then FFN."""

from __future__ import annotations

from ..common.blocks import AttentionFlow, SlidingWindowFlow
from ..layers.attention import KVCache
from .backbone import LanguageModel, register
from .blocks import Built


class AttentionBlock(AttentionFlow, Built):
    """``common/blocks.py``'s ``AttentionFlow`` (shared with the MLX mirror) built from torch
    parts."""

    state_class = KVCache


class SlidingWindowBlock(SlidingWindowFlow, AttentionBlock):
    """``common/blocks.py``'s ``SlidingWindowFlow`` on the attention block."""


@register("swa")
class SWA(LanguageModel):
    """Sliding-window attention only (window = ``config.window``), persistent tokens visible."""

    block_class = SlidingWindowBlock


@register("transformer", num_persistent=0)
class Transformer(LanguageModel):
    """Full causal attention; its KV cache grows with the context."""

    block_class = AttentionBlock
