"""Sublayers shared by the MLX architectures (mirrors ``titans_atlas.models.blocks``):
pre-norm residual feed-forward and attention, and the non-linear gate of MAG/MAC.

Axes: B batch, T tokens, D model width.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from ...common.blocks import attention_args
from ...layers.attention import VisibilityRule
from ...models.config import ModelConfig
from ..layers.attention import Attention, KVCache
from ..layers.basic import SwiGLU


class FeedForward(nn.Module):
    """x + SwiGLU(RMSNorm(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.ffn = SwiGLU(config.dim, config.ffn_hidden)

    def __call__(self, x: mx.array) -> mx.array:
        return x + self.ffn(self.norm(x))


def make_attention(config: ModelConfig, rule: VisibilityRule, persistent: bool = True):
    return Attention(*attention_args(config, rule, persistent))


class ResidualAttention(nn.Module):
    """x + Attn(RMSNorm(x)) with a KV cache in the block state."""

    def __init__(self, config: ModelConfig, rule: VisibilityRule) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.attn = make_attention(config, rule)

    def __call__(self, x: mx.array, cache: KVCache | None, position: int):
        y, cache = self.attn(self.norm(x), cache, position)
        return x + y, cache


class NonLinearGate(nn.Module):
    """o = RMSNorm(y) * sigmoid(RMSNorm(m)) (Titans eq. 28; MAC's eq. 25 uses it too)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm_y = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.norm_m = nn.RMSNorm(config.dim, eps=config.norm_eps)

    def __call__(self, y: mx.array, m: mx.array) -> mx.array:
        return self.norm_y(y) * mx.sigmoid(self.norm_m(m))
