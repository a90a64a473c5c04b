"""Small building blocks: SwiGLU feed-forward, causal short convolution, rotary positions.

Axes: B batch, T tokens, D model width, H heads, Dh head width, K convolution kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SwiGLU(nn.Module):
    """Llama's feed-forward: down(silu(gate(x)) * up(x)), ``[B, T, D] -> [B, T, D]``."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, hidden_dim, bias=False)
        self.up = nn.Linear(dim, hidden_dim, bias=False)
        self.down = nn.Linear(hidden_dim, dim, bias=False)
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

    def init_weights(self) -> None:
        """PyTorch's default Conv1d initialisation (uniform in +-1/sqrt(kernel_size))."""
        self.conv.reset_parameters()

    def forward(
        self, x: torch.Tensor, cache: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if cache is None:
            cache = x.new_zeros(x.shape[0], self.kernel_size - 1, x.shape[2])
        padded = torch.cat([cache.to(x.dtype), x], dim=1)  # [B, K-1+T, D]
        y = self.conv(padded.transpose(1, 2)).transpose(1, 2)  # [B, T, D]
        # a contiguous copy: a slice would pin the whole [B, K-1+T, D] input inside the returned
        # state, and its strides would differ with T (a recompile for a compiled decode step)
        tail = padded[:, padded.shape[1] - (self.kernel_size - 1) :]
        return y, tail.clone(memory_format=torch.contiguous_format)


def rotary(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i + Dh/2}) of ``x`` ``[B, H, T, Dh]`` by angle pos * base^(-2i/Dh)
    (the GPT-NeoX / Llama convention). ``positions`` ``[T]`` are absolute token positions."""
    half = x.shape[-1] // 2
    freqs = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.to(torch.float32)[:, None] * freqs[None, :]  # [T, Dh/2]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., :half], x[..., half : 2 * half]
    rotated = torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    return torch.cat([rotated, x[..., 2 * half :]], dim=-1)
