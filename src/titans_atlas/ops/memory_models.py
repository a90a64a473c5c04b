"""Functional memory models f(W, x): the networks whose weights are the memory.

Axes: B batch, H heads, N tokens, Dk input (key) width, Dv output (value) width, Dh hidden.
Weights are dicts name -> ``[H, d_in, d_out]`` (learned initial weights) or
``[B, H, d_in, d_out]`` (a stream's weights); inputs are ``[B, H, N, Dk]``.

Every model is written once, in ``forward_with(linear, x)``, against a callback
``linear(name, h)`` that multiplies ``h`` by weight ``name``. ``forward`` passes a plain
matmul; the chunked scan passes a callback that applies each token's *updated* weights
through the dual form (so layer 2 of an MLP reads through layer 1's updated output) without
ever building them. ``grad_factors`` is the analytic inner gradient of
``0.5 * ||f(W, k) - v||^2``: for every weight it is a rank-1 outer product per token,
``grad_W = a^T b``, returned as the pair ``(a, b)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..common.memory_models import (  # noqa: F401  (ACTIVATIONS: re-exported)
    ACTIVATIONS,
    GatedMLPSpec,
    LinearSpec,
    MemorySpec,
    MLPSpec,
)
from ..validation import check_int
from .activations import activation, activation_with_slope
from .state import MemoryState, TensorDict

Linear = Callable[[str, torch.Tensor], torch.Tensor]
Factors = dict[str, tuple[torch.Tensor, torch.Tensor]]


def _transpose(weight: torch.Tensor) -> torch.Tensor:
    return weight.transpose(-1, -2)


class MemoryModel(MemorySpec):
    """The array code of a memory model; its spec (``common/memory_models.py``) names the
    weights and checks the settings."""

    def forward_with(self, linear: Linear, x: torch.Tensor) -> torch.Tensor:
        """f(W, x) with every ``h @ W[name]`` delegated to ``linear(name, h)``."""
        raise NotImplementedError

    def grad_factors(self, weights: TensorDict, k: torch.Tensor, v: torch.Tensor) -> Factors:
        """Per-token rank-1 factors of grad_W 0.5||f(W, k) - v||^2: name -> (a, b),
        ``a`` ``[B, H, N, d_in]``, ``b`` ``[B, H, N, d_out]``, gradient of token n = a_n^T b_n."""
        raise NotImplementedError

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

    def forward(self, weights: TensorDict, x: torch.Tensor) -> torch.Tensor:
        """Read the memory: x ``[B, H, N, Dk]`` -> ``[B, H, N, Dv]``."""
        return self.forward_with(lambda name, h: h @ weights[name], x)


@dataclass(frozen=True)
class LinearMemory(LinearSpec, MemoryModel):
    """f(W, x) = x W1 -- the linear associative memory (delta-rule family)."""

    def forward_with(self, linear: Linear, x: torch.Tensor) -> torch.Tensor:
        return linear("w1", x)

    def grad_factors(self, weights: TensorDict, k: torch.Tensor, v: torch.Tensor) -> Factors:
        return {"w1": (k, k @ weights["w1"] - v)}


@dataclass(frozen=True)
class MLPMemory(MLPSpec, MemoryModel):
    """f(W, x) = sigma(... sigma(x W1) ...) WL, optionally + x (needs dim_in == dim_out)."""

    def forward_with(self, linear: Linear, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i in range(1, self.depth + 1):
            h = linear(f"w{i}", h)
            if i < self.depth:
                h = activation(self.activation, h)
        return h + x if self.residual else h

    def grad_factors(self, weights: TensorDict, k: torch.Tensor, v: torch.Tensor) -> Factors:
        inputs, slopes = [k], []  # inputs[i] feeds w{i+1}; slopes[i] = act'(inputs[i] @ w{i+1})
        for i in range(1, self.depth):
            hidden, slope = activation_with_slope(self.activation, inputs[-1] @ weights[f"w{i}"])
            inputs.append(hidden)
            slopes.append(slope)
        out = inputs[-1] @ weights[f"w{self.depth}"]
        delta = out + k - v if self.residual else out - v  # d loss / d out
        factors = {f"w{self.depth}": (inputs[-1], delta)}
        for i in range(self.depth - 1, 0, -1):
            delta = (delta @ _transpose(weights[f"w{i + 1}"])) * slopes[i - 1]
            factors[f"w{i}"] = (inputs[i - 1], delta)
        return factors


@dataclass(frozen=True)
class GatedMLPMemory(GatedMLPSpec, MemoryModel):
    """f(W, x) = (silu(x Wg) * (x Wu)) Wd, optionally + x -- the SwiGLU memory of ATLAS++."""

    def forward_with(self, linear: Linear, x: torch.Tensor) -> torch.Tensor:
        hidden = F.silu(linear("gate", x)) * linear("up", x)
        out = linear("down", hidden)
        return out + x if self.residual else out

    def grad_factors(self, weights: TensorDict, k: torch.Tensor, v: torch.Tensor) -> Factors:
        up = k @ weights["up"]
        gate_act, gate_slope = activation_with_slope("silu", k @ weights["gate"])
        hidden = gate_act * up
        out = hidden @ weights["down"]
        delta = out + k - v if self.residual else out - v
        d_hidden = delta @ _transpose(weights["down"])
        return {
            "gate": (k, d_hidden * up * gate_slope),
            "up": (k, d_hidden * gate_act),
            "down": (hidden, delta),
        }
