"""Controls without memory: sliding-window attention (SWA) and a full-attention Transformer
(Transformer++ in the papers). Block: x + Attn(norm(x)), then FFN."""

from __future__ import annotations

from torch import nn

from ..common.blocks import AttentionFlow
from ..layers.attention import KVCache, VisibilityRule
from .backbone import LanguageModel, register
from .blocks import FeedForward, ResidualAttention
from .config import ModelConfig


class AttentionBlock(AttentionFlow, nn.Module):
    """The submodules here; the data flow between them is ``common/blocks.py``'s ``AttentionFlow``
    (shared with the MLX mirror)."""

    state_class = KVCache
    rule_of = staticmethod(lambda config: VisibilityRule())

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attn = ResidualAttention(config, self.rule_of(config))
        self.ffn = FeedForward(config)

    def init_weights(self, std: float, out_std: float) -> None:
        self.attn.init_weights(std, out_std)
        self.ffn.init_weights(std, out_std)


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
