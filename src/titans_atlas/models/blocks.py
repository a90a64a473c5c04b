"""Sublayers shared by the architectures: pre-norm residual feed-forward and attention, the
non-linear gate of MAG/MAC, and the typed state of a block with attention and memory.

Axes: B batch, T tokens, D model width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..common.blocks import attention_args
from ..layers.attention import Attention, KVCache, VisibilityRule
from ..layers.basic import SwiGLU
from ..layers.neural_memory import MemoryLayerState
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


class FeedForward(nn.Module):
    """x + SwiGLU(RMSNorm(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.ffn = SwiGLU(config.dim, config.ffn_hidden)

    def init_weights(self, std: float, out_std: float) -> None:
        self.norm.reset_parameters()
        self.ffn.init_weights(std, out_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ffn(self.norm(x))


def make_attention(config: ModelConfig, rule: VisibilityRule, persistent: bool = True):
    return Attention(*attention_args(config, rule, persistent))


class ResidualAttention(nn.Module):
    """x + Attn(RMSNorm(x)) with a KV cache in the block state."""

    def __init__(self, config: ModelConfig, rule: VisibilityRule) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.attn = make_attention(config, rule)

    def init_weights(self, std: float, out_std: float) -> None:
        self.norm.reset_parameters()
        self.attn.init_weights(std, out_std)

    def forward(self, x: torch.Tensor, cache: KVCache | None, position: int):
        y, cache = self.attn(self.norm(x), cache, position)
        return x + y, cache


class NonLinearGate(nn.Module):
    """o = RMSNorm(y) * sigmoid(RMSNorm(m)) with learnable normalisation weights (Titans
    eq. 28); MAC's y (x) M*(y) (eq. 25) uses the same gate."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm_y = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.norm_m = nn.RMSNorm(config.dim, eps=config.norm_eps)

    def init_weights(self) -> None:
        self.norm_y.reset_parameters()
        self.norm_m.reset_parameters()

    def forward(self, y: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return self.norm_y(y) * torch.sigmoid(self.norm_m(m))
