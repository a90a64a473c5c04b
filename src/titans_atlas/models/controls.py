"""Controls without memory: sliding-window attention (SWA) and a full-attention Transformer
(Transformer++ in the papers). Block: x + Attn(norm(x)), then FFN."""

from __future__ import annotations

import torch
from torch import nn

from ..layers.attention import KVCache, VisibilityRule
from .backbone import LanguageModel, register
from .blocks import FeedForward, ResidualAttention
from .config import ModelConfig


class AttentionBlock(nn.Module):
    state_class = KVCache
    rule_of = staticmethod(lambda config: VisibilityRule())

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attn = ResidualAttention(config, self.rule_of(config))
        self.ffn = FeedForward(config)

    def init_weights(self, std: float, out_std: float) -> None:
        self.attn.init_weights(std, out_std)
        self.ffn.init_weights(std, out_std)

    def forward(
        self, x: torch.Tensor, state: KVCache | None, position: int
    ) -> tuple[torch.Tensor, KVCache]:
        x, cache = self.attn(x, state, position)
        return self.ffn(x), cache


class SlidingWindowBlock(AttentionBlock):
    rule_of = staticmethod(lambda config: VisibilityRule(window=config.window))


@register("swa")
class SWA(LanguageModel):
    """Sliding-window attention only (window = ``config.window``), persistent tokens visible."""

    block_class = SlidingWindowBlock


@register("transformer", num_persistent=0)
class Transformer(LanguageModel):
    """Full causal attention; its KV cache grows with the context."""

    block_class = AttentionBlock
