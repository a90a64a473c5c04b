"""MAG, memory as a gate (Titans eqs. 26-28).

Block: h = norm(x); y = SWA([persistent ; h]); m = Mem(h) (per-token read);
x + RMSNorm(y) * sigmoid(RMSNorm(m)); then FFN. The two branches run side by side.
"""

from __future__ import annotations

from torch import nn

from ..common.blocks import MAGFlow
from ..layers.attention import VisibilityRule
from ..layers.neural_memory import NeuralMemory
from .backbone import LanguageModel, register
from .blocks import FeedForward, HybridState, NonLinearGate, make_attention
from .config import ModelConfig


class MAGBlock(MAGFlow, nn.Module):
    """The submodules here; the data flow between them is ``common/blocks.py``'s ``MAGFlow``
    (shared with the MLX mirror)."""

    state_class = HybridState

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.attn = make_attention(config, VisibilityRule(window=config.window))
        self.memory = NeuralMemory(config.dim, config.num_heads, config.memory)
        self.gate = NonLinearGate(config)
        self.ffn = FeedForward(config)

    def init_weights(self, std: float, out_std: float) -> None:
        self.norm.reset_parameters()
        self.attn.init_weights(std, out_std)
        self.memory.init_weights(std, out_std)
        self.gate.init_weights()
        self.ffn.init_weights(std, out_std)


@register("mag")
class MAG(LanguageModel):
    block_class = MAGBlock
