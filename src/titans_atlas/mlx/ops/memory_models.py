"""Functional memory models f(W, x) in MLX (mirrors ``titans_atlas.ops.memory_models``).

Axes: B batch, H heads, N tokens, Dk input (key) width, Dv output (value) width, Dh hidden.
Weights are dicts name -> ``[H, d_in, d_out]`` (learned initial weights) or
``[B, H, d_in, d_out]`` (a stream's weights); inputs are ``[B, H, N, Dk]``.

Each model's maths (``forward_with``, ``grad_factors``) is written once for both backends in
``common/memory_models.py``; this file gives it MLX's activations, init, state and checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx

from ...common.memory_models import (  # noqa: F401  (ACTIVATIONS, Factors, Linear: re-exported)
    ACTIVATIONS,
    Factors,
    GatedMLPSpec,
    Linear,
    LinearSpec,
    MemorySpec,
    MLPSpec,
)
from ...validation import check_int
from .state import ArrayDict, MemoryState


def gelu(z: mx.array) -> mx.array:
    """The exact (erf) GELU, as ``torch.nn.functional.gelu``."""
    return 0.5 * z * (1.0 + mx.erf(z * (1.0 / math.sqrt(2.0))))


def silu(z: mx.array) -> mx.array:
    return z * mx.sigmoid(z)


def activation(name: str, z: mx.array) -> mx.array:
    """GELU (exact, erf form) or SiLU."""
    return gelu(z) if name == "gelu" else silu(z)


def activation_with_slope(name: str, z: mx.array) -> tuple[mx.array, mx.array]:
    """(act(z), act'(z)), as the torch ``activation_with_slope``."""
    if name == "gelu":  # d/dz [z * Phi(z)] = Phi(z) + z * phi(z)
        cdf = 0.5 * (1.0 + mx.erf(z * (1.0 / math.sqrt(2.0))))
        pdf = mx.exp(-0.5 * z * z) * (1.0 / math.sqrt(2.0 * math.pi))
        return gelu(z), cdf + z * pdf
    sig = mx.sigmoid(z)  # d/dz [z * s(z)] = s + z s (1 - s)
    return silu(z), sig * (1.0 + z * (1.0 - sig))


class MemoryModel(MemorySpec):
    """The array code of a memory model; its spec (``common/memory_models.py``) names the
    weights and checks the settings."""

    _activation = staticmethod(activation)
    _activation_with_slope = staticmethod(activation_with_slope)

    @staticmethod
    def _transpose(weight: mx.array) -> mx.array:
        return mx.swapaxes(weight, -1, -2)

    def init_weights(
        self, num_heads: int, *, dtype: mx.Dtype = mx.float32, key: mx.array | None = None
    ) -> ArrayDict:
        """Fresh initial weights, name -> ``[H, d_in, d_out]``."""
        check_int("num_heads", num_heads, 1)
        weights = {}
        for name, (d_in, d_out) in self.weight_shapes().items():
            if key is not None:
                key, sub = mx.random.split(key)
            else:
                sub = None
            noise = mx.random.normal((num_heads, d_in, d_out), dtype=dtype, key=sub)
            weights[name] = noise * self._init_std(name, d_in)
        return weights

    def initial_state(self, weights: ArrayDict, batch_size: int) -> MemoryState:
        """A new stream: the initial weights broadcast per sample, zero momentum."""
        check_int("batch_size", batch_size, 1)
        self.check_weights(weights, batched=False)
        stream = {n: mx.broadcast_to(w[None], (batch_size, *w.shape)) for n, w in weights.items()}
        momentum = {n: mx.zeros_like(w) for n, w in stream.items()}
        return MemoryState(weights=stream, momentum=momentum)

    def check_weights(self, weights: ArrayDict, *, batched: bool, name: str = "weights") -> None:
        """Raise ValueError unless ``weights`` has exactly this model's names and shapes."""
        self.check_weight_dict(
            weights, batched=batched, name=name, is_array=mx.array,
            floating=lambda w: mx.issubdtype(w.dtype, mx.floating),
        )  # fmt: skip


@dataclass(frozen=True)
class LinearMemory(LinearSpec, MemoryModel):
    """f(W, x) = x W1 -- the linear associative memory."""


@dataclass(frozen=True)
class MLPMemory(MLPSpec, MemoryModel):
    """f(W, x) = sigma(... sigma(x W1) ...) WL, optionally + x (needs dim_in == dim_out)."""


@dataclass(frozen=True)
class GatedMLPMemory(GatedMLPSpec, MemoryModel):
    """f(W, x) = (silu(x Wg) * (x Wu)) Wd, optionally + x -- the SwiGLU memory of ATLAS++."""


# ``MemoryConfig.model`` -> class (``common.memory_models.build_memory`` picks from it)
MEMORY_CLASSES = {"linear": LinearMemory, "mlp": MLPMemory, "gated_mlp": GatedMLPMemory}
