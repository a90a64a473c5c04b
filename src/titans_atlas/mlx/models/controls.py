"""Controls without memory in MLX: sliding-window attention (SWA) and a full-attention
Transformer. Block: x + Attn(norm(x)), then FFN; the block state is the KV cache."""

from __future__ import annotations

import mlx.nn as nn

from ...common.blocks import AttentionFlow
from ...layers.attention import VisibilityRule
from ...models.config import ModelConfig
from .backbone import LanguageModel, register
from .blocks import FeedForward, ResidualAttention


class AttentionBlock(AttentionFlow, nn.Module):
    rule_of = staticmethod(lambda config: VisibilityRule())

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attn = ResidualAttention(config, self.rule_of(config))
        self.ffn = FeedForward(config)

    __call__ = AttentionFlow.forward


class SlidingWindowBlock(AttentionBlock):
    rule_of = staticmethod(lambda config: VisibilityRule(window=config.window))


@register("swa")
class SWA(LanguageModel):
    block_class = SlidingWindowBlock


@register("transformer")
class Transformer(LanguageModel):
    block_class = AttentionBlock
