"""Sublayers shared by the architectures: pre-norm residual feed-forward and attention, the
non-linear gate of MAG/MAC, and the typed state of a block with attention and memory.

Axes: B batch, T tokens, D model width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..common.blocks import BlockParts, FeedForwardFlow, GateNorms, ResidualAttentionFlow
from ..layers.attention import Attention, KVCache
from ..layers.basic import SwiGLU
from ..layers.neural_memory import MemoryLayerState, NeuralMemory
from .config import ModelConfig


class FieldAccess:
    """``state["memory"]`` reads ``state.memory``: block states were dicts before they were
    dataclasses, and tests/ops still reads them so. TODO(#12): drop once nothing does."""

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


@dataclass
class HybridState(FieldAccess):
    """A MAG / MAL block's stream: the attention's KV cache and the memory layer's state
    (None before the first token)."""

    attn: KVCache | None = None
    memory: MemoryLayerState | None = None


class Built(nn.Module):
    """A module whose submodules its flow's ``build`` (``common/blocks.py``, shared with the
    MLX mirror) makes from the torch ``PARTS``; ``init_weights`` draws them again in the
    order built."""

    def __init__(self, config: ModelConfig, *args: Any) -> None:
        super().__init__()
        self.build(PARTS, config, *args)

    def init_weights(self, std: float, out_std: float) -> None:
        """Norms back to ones; every other submodule by its own ``init_weights``."""
        for child in self.children():
            if isinstance(child, nn.RMSNorm):
                child.reset_parameters()
            else:
                child.init_weights(std, out_std)


class FeedForward(FeedForwardFlow, Built):
    """x + SwiGLU(RMSNorm(x))."""


class ResidualAttention(ResidualAttentionFlow, Built):
    """x + Attn(RMSNorm(x)) with a KV cache in the block state."""


class NonLinearGate(GateNorms, Built):
    """o = RMSNorm(y) * sigmoid(RMSNorm(m)) with learnable normalisation weights (Titans
    eq. 28); MAC's y (x) M*(y) (eq. 25) uses the same gate. With ``attention_gates``
    (``mag_gate`` or ``mac_gate`` "attention"): RMSNorm(m) * sigmoid(RMSNorm(y)), y's gain
    starting at zero."""

    def forward(self, y: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        if self.attention_gates:
            return self.norm_m(m) * torch.sigmoid(self.norm_y(y))
        return self.norm_y(y) * torch.sigmoid(self.norm_m(m))

    def init_weights(self, std: float, out_std: float) -> None:
        super().init_weights(std, out_std)
        if self.zero_gain_norm is not None:
            nn.init.zeros_(self.zero_gain_norm.weight)


PARTS = BlockParts(
    nn.RMSNorm, Attention, NeuralMemory, SwiGLU, FeedForward, ResidualAttention, NonLinearGate
)
