"""Functional memory models f(W, x): the networks whose weights are the memory.

Axes: B batch, H heads, N tokens, Dk input (key) width, Dv output (value) width, Dh hidden.
Weights are dicts name -> ``[H, d_in, d_out]`` (learned initial weights) or
``[B, H, d_in, d_out]`` (a stream's weights); inputs are ``[B, H, N, Dk]``.

Each model's maths -- ``forward_with(linear, x)`` and the analytic inner gradient
``grad_factors`` -- is written once for both backends in ``common/memory_models.py``; this
file gives it torch's activations and the framework's init, state and weight checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..common.memory_models import (  # noqa: F401  (ACTIVATIONS, Factors, Linear: re-exported)
    ACTIVATIONS,
    Factors,
    GatedMLPSpec,
    Linear,
    LinearSpec,
    MemorySpec,
    MLPSpec,
)
from ..validation import check_int
from .activations import activation, activation_with_slope
from .state import MemoryState, TensorDict


class MemoryModel(MemorySpec):
    """The array code of a memory model; its spec (``common/memory_models.py``) names the
    weights and checks the settings."""

    _activation = staticmethod(activation)
    # one autograd node that saves only z (ops/activations.py)
    _activation_with_slope = staticmethod(activation_with_slope)

    @staticmethod
    def _transpose(weight: torch.Tensor) -> torch.Tensor:
        return weight.transpose(-1, -2)

    def init_weights(
        self,
        num_heads: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        generator: torch.Generator | None = None,
    ) -> TensorDict:
        """Fresh initial weights, name -> ``[H, d_in, d_out]`` (a layer makes them Parameters)."""
        check_int("num_heads", num_heads, 1)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
        weights = {}
        for name, (d_in, d_out) in self.weight_shapes().items():
            noise = torch.randn(num_heads, d_in, d_out, generator=generator, dtype=dtype)
            weights[name] = (noise * self._init_std(name, d_in)).to(device)
        return weights

    def initial_state(self, weights: TensorDict, batch_size: int) -> MemoryState:
        """A new stream: W_{-1} = the initial weights broadcast per sample, zero momentum."""
        check_int("batch_size", batch_size, 1)
        self.check_weights(weights, batched=False)
        stream = {n: w.unsqueeze(0).expand(batch_size, *w.shape) for n, w in weights.items()}
        momentum = {n: torch.zeros_like(w) for n, w in stream.items()}
        return MemoryState(weights=stream, momentum=momentum)

    def check_weights(self, weights: TensorDict, *, batched: bool, name: str = "weights") -> None:
        """Raise ValueError unless ``weights`` has exactly this model's names and shapes, as
        floating-point tensors."""
        self.check_weight_dict(
            weights, batched=batched, name=name, is_array=torch.Tensor,
            floating=lambda w: w.is_floating_point(),
        )  # fmt: skip


@dataclass(frozen=True)
class LinearMemory(LinearSpec, MemoryModel):
    """f(W, x) = x W1 -- the linear associative memory (delta-rule family)."""


@dataclass(frozen=True)
class MLPMemory(MLPSpec, MemoryModel):
    """f(W, x) = sigma(... sigma(x W1) ...) WL, optionally + x (needs dim_in == dim_out)."""


@dataclass(frozen=True)
class GatedMLPMemory(GatedMLPSpec, MemoryModel):
    """f(W, x) = (silu(x Wg) * (x Wu)) Wd, optionally + x -- the SwiGLU memory of ATLAS++."""


# ``MemoryConfig.model`` -> class (``common.memory_models.build_memory`` picks from it)
MEMORY_CLASSES = {"linear": LinearMemory, "mlp": MLPMemory, "gated_mlp": GatedMLPMemory}
