"""Small building blocks in MLX: SwiGLU feed-forward, causal short convolution, rotary
positions (mirrors ``titans_atlas.layers.basic``; parameter names and layouts are torch's, so
checkpoints load unchanged).

Axes: B batch, T tokens, D model width, H heads, Dh head width, K convolution kernel.
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn

from ...common.attention import SwiGLULayout
from ..ops.memory_models import silu


def normal_init(module: nn.Linear | nn.Embedding, std: float = 0.02) -> None:
    """The backbone's init of every projection and embedding: N(0, std)."""
    module.weight = std * mx.random.normal(module.weight.shape)


class SwiGLU(SwiGLULayout, nn.Module):
    """Llama's feed-forward: down(silu(gate(x)) * up(x)), ``[B, T, D] -> [B, T, D]``."""

    linear = nn.Linear

    def _init_parameters(self) -> None:
        for linear in (self.gate, self.up, self.down):
            normal_init(linear)

    def __call__(self, x: mx.array) -> mx.array:
        return self.down(silu(self.gate(x)) * self.up(x))


class DepthwiseConv1d(nn.Module):
    """The parameters of ``torch.nn.Conv1d(C, C, K, groups=C)``: weight ``[C, 1, K]``, bias
    ``[C]``, with torch's default uniform(-1/sqrt(K), 1/sqrt(K)) init; ``matched``: the taps
    made non-negative and the bias zero (the torch ``CausalConv.init_weights`` says why)."""

    def __init__(self, channels: int, kernel_size: int, matched: bool = False) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(kernel_size)
        self.weight = mx.random.uniform(-bound, bound, (channels, 1, kernel_size))
        self.bias = mx.random.uniform(-bound, bound, (channels,))
        if matched:
            self.weight, self.bias = mx.abs(self.weight), mx.zeros((channels,))

    def init_shift(self, lag: int) -> None:
        """A pure delay of ``lag`` tokens (the torch ``CausalConv.init_shift``)."""
        taps = self.weight.shape[-1]
        lag = min(lag, taps - 1)
        delay = (mx.arange(taps) == taps - 1 - lag).astype(self.weight.dtype)
        self.weight = mx.broadcast_to(delay, self.weight.shape)
        self.bias = mx.zeros_like(self.bias)


class CausalConv(nn.Module):
    """Depthwise causal 1-D convolution over time with a streaming cache.

    ``(x [B, T, D], cache [B, K-1, D] | None) -> (y [B, T, D], cache)``.
    """

    def __init__(self, channels: int, kernel_size: int = 4, matched: bool = False) -> None:
        super().__init__()
        if kernel_size < 1:
            raise ValueError(f"kernel_size must be >= 1, got {kernel_size}")
        self.kernel_size = kernel_size
        self.conv = DepthwiseConv1d(channels, kernel_size, matched)

    def __call__(self, x: mx.array, cache: mx.array | None = None) -> tuple[mx.array, mx.array]:
        length, taps = x.shape[1], self.kernel_size
        if cache is None:
            cache = mx.zeros((x.shape[0], taps - 1, x.shape[2]), dtype=x.dtype)
        padded = mx.concatenate([cache.astype(x.dtype), x], axis=1)  # [B, K-1+T, D]
        weight = self.conv.weight[:, 0]  # [D, K]
        y = self.conv.bias + padded[:, :length] * weight[:, 0]
        for j in range(1, taps):  # tap j multiplies input t + j - (K - 1)
            y = y + padded[:, j : j + length] * weight[:, j]
        return y, padded[:, padded.shape[1] - (taps - 1) :]


def rotary(x: mx.array, positions: mx.array, base: float = 10000.0) -> mx.array:
    """Rotate pairs (x_i, x_{i + Dh/2}) of ``x`` ``[B, H, T, Dh]`` by angle pos * base^(-2i/Dh)
    (GPT-NeoX / Llama convention). ``positions`` ``[T]`` are absolute token positions."""
    half = x.shape[-1] // 2
    freqs = base ** (-mx.arange(half, dtype=mx.float32) / half)
    angles = positions.astype(mx.float32)[:, None] * freqs[None, :]  # [T, Dh/2]
    cos, sin = mx.cos(angles).astype(x.dtype), mx.sin(angles).astype(x.dtype)
    first, second = x[..., :half], x[..., half : 2 * half]
    rotated = [first * cos - second * sin, first * sin + second * cos, x[..., 2 * half :]]
    return mx.concatenate(rotated, axis=-1)
