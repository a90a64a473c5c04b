"""Small building blocks: SwiGLU feed-forward, causal short convolution, rotary positions.

Axes: B batch, T tokens, D model width, H heads, Dh head width, K convolution kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..common.attention import SwiGLULayout


class SwiGLU(SwiGLULayout, nn.Module):
    """Llama's feed-forward: down(silu(gate(x)) * up(x)), ``[B, T, D] -> [B, T, D]``; built by
    ``common/attention.py``'s ``SwiGLULayout`` (shared with the MLX mirror)."""

    linear = nn.Linear

    def _init_parameters(self) -> None:
        self.init_weights()

    @torch.no_grad()
    def init_weights(self, std: float = 0.02, out_std: float | None = None) -> None:
        """N(0, std) for the input projections, N(0, out_std) (default std) for ``down``."""
        nn.init.normal_(self.gate.weight, std=std)
        nn.init.normal_(self.up.weight, std=std)
        nn.init.normal_(self.down.weight, std=std if out_std is None else out_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class CausalConv(nn.Module):
    """Depthwise causal 1-D convolution over time with a streaming cache.

    ``forward(x [B, T, D], cache [B, K-1, D] | None) -> (y [B, T, D], cache)``: the cache holds
    the last K - 1 inputs, so any split of a stream gives the same output as one call.
    """

    def __init__(self, channels: int, kernel_size: int = 4) -> None:
        super().__init__()
        if kernel_size < 1:
            raise ValueError(f"kernel_size must be >= 1, got {kernel_size}")
        self.kernel_size = kernel_size
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, bias=True)

    @torch.no_grad()
    def init_weights(self, matched: bool = False) -> None:
        """PyTorch's default Conv1d initialisation (uniform in +-1/sqrt(kernel_size)); with
        ``matched`` the taps made non-negative and the bias zero.

        Why ``matched`` (the memory layer's default): the default bias, up to 1/sqrt(K) per
        channel, is ~25x the std-0.02 projections it is added to, so every token's key starts
        as nearly the same vector (mean cosine 0.99 between positions) and the memory cannot
        tell keys apart; signed taps also turn a query and its own key's conv into different
        mixtures. Non-negative taps and no bias keep each output a positive blend of recent
        tokens, so equal q and k projections give aligned q and k."""
        self.conv.reset_parameters()
        if matched:
            self.conv.weight.abs_()
            self.conv.bias.zero_()

    @torch.no_grad()
    def init_shift(self, lag: int) -> None:
        """Start as a pure delay: every channel's output is its input ``lag`` tokens back
        (one tap 1, the others and the bias 0; ``lag`` clamped to the kernel)."""
        lag = min(lag, self.kernel_size - 1)
        self.conv.weight.zero_()
        self.conv.weight[:, 0, self.kernel_size - 1 - lag] = 1.0  # tap K-1 is the current token
        self.conv.bias.zero_()

    def forward(
        self, x: torch.Tensor, cache: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if cache is None:
            cache = x.new_zeros(x.shape[0], self.kernel_size - 1, x.shape[2])
        padded = torch.cat([cache.to(x.dtype), x], dim=1)  # [B, K-1+T, D]
        # K shifted multiply-adds instead of conv1d: its depthwise CPU kernel was 1.5-2.4x slower
        # (T = 1 to 1024, 256 channels); the parameters stay those of the nn.Conv1d.
        length, weight = x.shape[1], self.conv.weight[:, 0].to(x.dtype)  # [D, K]
        y = self.conv.bias.to(x.dtype) + padded[:, :length] * weight[:, 0]
        for k in range(1, self.kernel_size):
            y = y + padded[:, k : k + length] * weight[:, k]  # [B, T, D]
        # a contiguous copy: a slice would pin the whole [B, K-1+T, D] input inside the returned
        # state, and its strides would differ with T (a recompile for a compiled decode step)
        tail = padded[:, padded.shape[1] - (self.kernel_size - 1) :]
        return y, tail.clone(memory_format=torch.contiguous_format)


def rotary_tables(
    positions: torch.Tensor, head_dim: int, base: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[T, Dh/2]`` (fp32) of angle pos * base^(-2i/Dh) for absolute ``positions``
    ``[T]``: computed once per call and shared by queries and keys."""
    half = head_dim // 2
    freqs = base ** (-torch.arange(half, device=positions.device, dtype=torch.float32) / half)
    angles = positions.to(torch.float32)[:, None] * freqs[None, :]  # [T, Dh/2]
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i + Dh/2}) of ``x`` ``[B, H, T, Dh]`` by the angles of
    ``rotary_tables`` (the GPT-NeoX / Llama convention); an odd last feature is kept."""
    half = cos.shape[-1]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    first, second = x[..., :half], x[..., half : 2 * half]
    rotated = [first * cos - second * sin, first * sin + second * cos]
    if x.shape[-1] > 2 * half:
        rotated.append(x[..., 2 * half :])
    return torch.cat(rotated, dim=-1)


def rotary(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary positions for ``x`` ``[B, H, T, Dh]`` at absolute ``positions`` ``[T]``."""
    return apply_rotary(x, *rotary_tables(positions, x.shape[-1], base))
