"""MAG in MLX, memory as a gate (Titans eqs. 26-28).

Block: h = norm(x); y = SWA([persistent ; h]); m = Mem(h); x + RMSNorm(y) * sigmoid(RMSNorm(m));
then FFN.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.nn as nn

from ...common.blocks import MAGFlow
from ...layers.attention import VisibilityRule
from ...models.config import ModelConfig
from ..layers.attention import KVCache
from ..layers.neural_memory import MemoryLayerState, NeuralMemory
from .backbone import LanguageModel, register
from .blocks import FeedForward, NonLinearGate, make_attention


@dataclass
class HybridState:
    """The stream of a block with attention and a memory side by side (MAG) or in a row (MAL)."""

    attn: KVCache | None = None
    memory: MemoryLayerState | None = None


class MAGBlock(MAGFlow, nn.Module):
    state_class = HybridState

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.attn = make_attention(config, VisibilityRule(window=config.window))
        self.memory = NeuralMemory(config.dim, config.num_heads, config.memory)
        self.gate = NonLinearGate(config)
        self.ffn = FeedForward(config)

    __call__ = MAGFlow.forward


@register("mag")
class MAG(LanguageModel):
    block_class = MAGBlock
