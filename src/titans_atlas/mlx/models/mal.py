"""MAL in MLX, memory as a layer (Titans eqs. 29-31): the memory layer, then sliding-window
attention over its output. Block: x + Mem(norm(x)); then x + SWA(norm(x)); then FFN."""

from __future__ import annotations

import mlx.nn as nn

from ...common.blocks import MALFlow
from ...layers.attention import VisibilityRule
from ...models.config import ModelConfig
from ..layers.neural_memory import NeuralMemory
from .backbone import LanguageModel, register
from .blocks import FeedForward, ResidualAttention
from .mag import HybridState


class MALBlock(MALFlow, nn.Module):
    state_class = HybridState

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.memory = NeuralMemory(config.dim, config.num_heads, config.memory)
        self.attn = ResidualAttention(config, VisibilityRule(window=config.window))
        self.ffn = FeedForward(config)

    __call__ = MALFlow.forward


@register("mal")
class MAL(LanguageModel):
    block_class = MALBlock
