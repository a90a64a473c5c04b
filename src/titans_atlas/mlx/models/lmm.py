"""LMM in MLX: the long-term memory alone. Block: x + Mem(norm(x)), then FFN."""

from __future__ import annotations

import mlx.nn as nn

from ...models.config import ModelConfig
from ..layers.neural_memory import NeuralMemory
from .backbone import LanguageModel, register
from .blocks import FeedForward


class MemoryBlock(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.memory = NeuralMemory(config.dim, config.num_heads, config.memory)
        self.ffn = FeedForward(config)

    def __call__(self, x, state, position):
        y, memory_state = self.memory(self.norm(x), state)
        return self.ffn(x + y), memory_state


@register("lmm")
class LMM(LanguageModel):
    """Memory layers and feed-forwards only; no attention."""

    block_class = MemoryBlock
