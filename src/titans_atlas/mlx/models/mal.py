"""MAL in MLX, memory as a layer (Titans eqs. 29-31): the memory layer, then sliding-window
attention over its output. Block: x + Mem(norm(x)); then x + SWA(norm(x)); then FFN."""

from __future__ import annotations

import mlx.nn as nn

from ...layers.attention import VisibilityRule
from ...models.config import ModelConfig
from ..layers.neural_memory import NeuralMemory
from .backbone import LanguageModel, register
from .blocks import FeedForward, ResidualAttention
from .mag import HybridState


class MALBlock(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.memory = NeuralMemory(config.dim, config.num_heads, config.memory)
        self.attn = ResidualAttention(config, VisibilityRule(window=config.window))
        self.ffn = FeedForward(config)

    def __call__(self, x, state: HybridState | None, position: int):
        state = state or HybridState()
        y, memory_state = self.memory(self.norm(x), state.memory)
        x, cache = self.attn(x + y, state.attn, position)
        return self.ffn(x), HybridState(attn=cache, memory=memory_state)


@register("mal")
class MAL(LanguageModel):
    block_class = MALBlock
