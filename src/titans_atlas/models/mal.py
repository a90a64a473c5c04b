"""MAL, memory as a layer (Titans eqs. 29-31): the memory layer, then sliding-window
attention over its output -- sequential, not a sum.

Block: x + Mem(norm(x)); then x + SWA(norm(x)); then FFN (each sublayer pre-norm residual,
so the attention reads the memory's output).
"""

from __future__ import annotations

from torch import nn

from ..common.blocks import MALFlow
from ..layers.attention import VisibilityRule
from ..layers.neural_memory import NeuralMemory
from .backbone import LanguageModel, register
from .blocks import FeedForward, HybridState, ResidualAttention
from .config import ModelConfig


class MALBlock(MALFlow, nn.Module):
    """The submodules here; the data flow between them is ``common/blocks.py``'s ``MALFlow``
    (shared with the MLX mirror)."""

    state_class = HybridState

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.memory = NeuralMemory(config.dim, config.num_heads, config.memory)
        self.attn = ResidualAttention(config, VisibilityRule(window=config.window))
        self.ffn = FeedForward(config)

    def init_weights(self, std: float, out_std: float) -> None:
        self.norm.reset_parameters()
        self.memory.init_weights(std, out_std)
        self.attn.init_weights(std, out_std)
        self.ffn.init_weights(std, out_std)


@register("mal")
class MAL(LanguageModel):
    block_class = MALBlock
