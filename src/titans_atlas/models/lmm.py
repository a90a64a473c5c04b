"""LMM: the long-term memory alone (Titans Section 4). Block: x + Mem(norm(x)), then FFN."""

from __future__ import annotations

import torch
from torch import nn

from ..layers.neural_memory import MemoryLayerState, NeuralMemory
from .backbone import LanguageModel, register
from .blocks import FeedForward
from .config import ModelConfig


class MemoryBlock(nn.Module):
    state_class = MemoryLayerState

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.memory = NeuralMemory(config.dim, config.num_heads, config.memory)
        self.ffn = FeedForward(config)

    def init_weights(self, std: float, out_std: float) -> None:
        self.norm.reset_parameters()
        self.memory.init_weights(std, out_std)
        self.ffn.init_weights(std, out_std)

    def forward(
        self, x: torch.Tensor, state: MemoryLayerState | None, position: int
    ) -> tuple[torch.Tensor, MemoryLayerState]:
        y, memory_state = self.memory(self.norm(x), state)
        return self.ffn(x + y), memory_state


@register("lmm")
class LMM(LanguageModel):
    """Memory layers and feed-forwards only; no attention."""

    block_class = MemoryBlock
