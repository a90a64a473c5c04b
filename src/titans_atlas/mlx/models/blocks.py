"""Sublayers shared by the MLX architectures (mirrors ``titans_atlas.models.blocks``):
pre-norm residual feed-forward and attention, and the non-linear gate of MAG/MAC.

Axes: B batch, T tokens, D model width.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ...common.blocks import BlockParts, FeedForwardFlow, GateNorms, ResidualAttentionFlow
from ...models.config import ModelConfig
from ..layers.attention import Attention
from ..layers.basic import SwiGLU
from ..layers.neural_memory import NeuralMemory


class Built(nn.Module):
    """A module whose submodules its flow's ``build`` (``common/blocks.py``, shared with the
    torch side) makes from the MLX ``PARTS``; calling it runs the flow's ``forward``."""

    def __init__(self, config: ModelConfig, *args: Any) -> None:
        super().__init__()
        self.build(PARTS, config, *args)

    def __call__(self, *args: Any) -> Any:
        return self.forward(*args)


class FeedForward(FeedForwardFlow, Built):
    """x + SwiGLU(RMSNorm(x))."""


class ResidualAttention(ResidualAttentionFlow, Built):
    """x + Attn(RMSNorm(x)) with a KV cache in the block state."""


class NonLinearGate(GateNorms, Built):
    """o = RMSNorm(y) * sigmoid(RMSNorm(m)) (Titans eq. 28; MAC's eq. 25 uses it too); with
    ``attention_gates`` (``mag_gate`` or ``mac_gate`` "attention") RMSNorm(m) * sigmoid(RMSNorm(y)),
    y's gain starting at zero."""

    def __init__(self, config: ModelConfig, *args: Any) -> None:
        super().__init__(config, *args)
        if self.zero_gain_norm is not None:
            self.zero_gain_norm.weight = mx.zeros_like(self.zero_gain_norm.weight)

    def forward(self, y: mx.array, m: mx.array) -> mx.array:
        if self.attention_gates:
            return self.norm_m(m) * mx.sigmoid(self.norm_y(y))
        return self.norm_y(y) * mx.sigmoid(self.norm_m(m))


PARTS = BlockParts(
    nn.RMSNorm, Attention, NeuralMemory, SwiGLU, FeedForward, ResidualAttention, NonLinearGate
)
