"""Sublayers shared by the architectures: pre-norm residual feed-forward and attention, and
the non-linear gate of MAG/MAC.

Axes: B batch, T tokens, D model width.
"""

from __future__ import annotations

import torch
from torch import nn

from ..layers.attention import Attention, KVCache, VisibilityRule
from ..layers.basic import SwiGLU
from .config import ModelConfig


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
    return Attention(
        config.dim,
        config.num_heads,
        rule,
        config.num_persistent if persistent else 0,
        config.rope_base,
    )


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
