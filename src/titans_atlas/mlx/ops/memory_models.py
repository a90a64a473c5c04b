"""Functional memory models f(W, x) in MLX (mirrors ``titans_atlas.ops.memory_models``).

Axes: B batch, H heads, N tokens, Dk input (key) width, Dv output (value) width, Dh hidden.
Weights are dicts name -> ``[H, d_in, d_out]`` (learned initial weights) or
``[B, H, d_in, d_out]`` (a stream's weights); inputs are ``[B, H, N, Dk]``.

Each network is written once, in ``forward_with(linear, x)``; ``grad_factors`` is the analytic
inner gradient of ``0.5 * ||f(W, k) - v||^2`` as per-token rank-1 factors ``(a, b)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx

from ...common.memory_models import (  # noqa: F401  (ACTIVATIONS: re-exported)
    ACTIVATIONS,
    GatedMLPSpec,
    LinearSpec,
    MemorySpec,
    MLPSpec,
)
from ...validation import check_int
from .state import ArrayDict, MemoryState

Linear = Callable[[str, mx.array], mx.array]
Factors = dict[str, tuple[mx.array, mx.array]]


def gelu(z: mx.array) -> mx.array:
    """The exact (erf) GELU, as ``torch.nn.functional.gelu``."""
    return 0.5 * z * (1.0 + mx.erf(z * (1.0 / math.sqrt(2.0))))


def silu(z: mx.array) -> mx.array:
    return z * mx.sigmoid(z)


def _activation(name: str, z: mx.array) -> mx.array:
    return gelu(z) if name == "gelu" else silu(z)


def _activation_derivative(name: str, z: mx.array) -> mx.array:
    if name == "gelu":  # d/dz [z * Phi(z)] = Phi(z) + z * phi(z)
        cdf = 0.5 * (1.0 + mx.erf(z * (1.0 / math.sqrt(2.0))))
        pdf = mx.exp(-0.5 * z * z) * (1.0 / math.sqrt(2.0 * math.pi))
        return cdf + z * pdf
    sig = mx.sigmoid(z)  # d/dz [z * s(z)] = s + z s (1 - s)
    return sig * (1.0 + z * (1.0 - sig))


def _transpose(weight: mx.array) -> mx.array:
    return mx.swapaxes(weight, -1, -2)


class MemoryModel(MemorySpec):
    """The array code of a memory model; its spec (``common/memory_models.py``) names the
    weights and checks the settings."""

    def forward_with(self, linear: Linear, x: mx.array) -> mx.array:
        """f(W, x) with every ``h @ W[name]`` delegated to ``linear(name, h)``."""
        raise NotImplementedError

    def grad_factors(self, weights: ArrayDict, k: mx.array, v: mx.array) -> Factors:
        """Per-token rank-1 factors of grad_W 0.5||f(W, k) - v||^2: name -> (a, b),
        ``a`` ``[B, H, N, d_in]``, ``b`` ``[B, H, N, d_out]``."""
        raise NotImplementedError

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

    def forward(self, weights: ArrayDict, x: mx.array) -> mx.array:
        """Read the memory: x ``[B, H, N, Dk]`` -> ``[B, H, N, Dv]``."""
        return self.forward_with(lambda name, h: h @ weights[name], x)


@dataclass(frozen=True)
class LinearMemory(LinearSpec, MemoryModel):
    """f(W, x) = x W1 -- the linear associative memory."""

    def forward_with(self, linear: Linear, x: mx.array) -> mx.array:
        return linear("w1", x)

    def grad_factors(self, weights: ArrayDict, k: mx.array, v: mx.array) -> Factors:
        return {"w1": (k, k @ weights["w1"] - v)}


@dataclass(frozen=True)
class MLPMemory(MLPSpec, MemoryModel):
    """f(W, x) = sigma(... sigma(x W1) ...) WL, optionally + x (needs dim_in == dim_out)."""

    def forward_with(self, linear: Linear, x: mx.array) -> mx.array:
        h = x
        for i in range(1, self.depth + 1):
            h = linear(f"w{i}", h)
            if i < self.depth:
                h = _activation(self.activation, h)
        return h + x if self.residual else h

    def grad_factors(self, weights: ArrayDict, k: mx.array, v: mx.array) -> Factors:
        inputs, pre_acts = [k], []  # inputs[i] feeds w{i+1}; pre_acts[i] = inputs[i] @ w{i+1}
        for i in range(1, self.depth):
            pre_acts.append(inputs[-1] @ weights[f"w{i}"])
            inputs.append(_activation(self.activation, pre_acts[-1]))
        out = inputs[-1] @ weights[f"w{self.depth}"]
        delta = out + k - v if self.residual else out - v  # d loss / d out
        factors = {f"w{self.depth}": (inputs[-1], delta)}
        for i in range(self.depth - 1, 0, -1):
            delta = (delta @ _transpose(weights[f"w{i + 1}"])) * _activation_derivative(
                self.activation, pre_acts[i - 1]
            )
            factors[f"w{i}"] = (inputs[i - 1], delta)
        return factors


@dataclass(frozen=True)
class GatedMLPMemory(GatedMLPSpec, MemoryModel):
    """f(W, x) = (silu(x Wg) * (x Wu)) Wd, optionally + x -- the SwiGLU memory of ATLAS++."""

    def forward_with(self, linear: Linear, x: mx.array) -> mx.array:
        hidden = silu(linear("gate", x)) * linear("up", x)
        out = linear("down", hidden)
        return out + x if self.residual else out

    def grad_factors(self, weights: ArrayDict, k: mx.array, v: mx.array) -> Factors:
        gate, up = k @ weights["gate"], k @ weights["up"]
        gate_act = silu(gate)
        hidden = gate_act * up
        out = hidden @ weights["down"]
        delta = out + k - v if self.residual else out - v
        d_hidden = delta @ _transpose(weights["down"])
        return {
            "gate": (k, d_hidden * up * _activation_derivative("silu", gate)),
            "up": (k, d_hidden * gate_act),
            "down": (hidden, delta),
        }
