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

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..validation import check_choice, check_int, check_number
from .activations import activation, activation_with_slope
from .state import MemoryState, TensorDict

Linear = Callable[[str, torch.Tensor], torch.Tensor]
Factors = dict[str, tuple[torch.Tensor, torch.Tensor]]

ACTIVATIONS = ("gelu", "silu")


def _transpose(weight: torch.Tensor) -> torch.Tensor:
    return weight.transpose(-1, -2)


class MemoryModel:
    """Shared behaviour of the memory models; subclasses define the network."""

    dim_in: int
    dim_out: int
    residual: bool = False

    def weight_shapes(self) -> dict[str, tuple[int, int]]:
        """name -> (d_in, d_out) of every weight, in forward order."""
        raise NotImplementedError

    def forward_with(self, linear: Linear, x: torch.Tensor) -> torch.Tensor:
        """f(W, x) with every ``h @ W[name]`` delegated to ``linear(name, h)``."""
        raise NotImplementedError

    def grad_factors(self, weights: TensorDict, k: torch.Tensor, v: torch.Tensor) -> Factors:
        """Per-token rank-1 factors of grad_W 0.5||f(W, k) - v||^2: name -> (a, b),
        ``a`` ``[B, H, N, d_in]``, ``b`` ``[B, H, N, d_out]``, gradient of token n = a_n^T b_n."""
        raise NotImplementedError

    def _init_std(self, name: str, fan_in: int) -> float:
        # LeCun normal: unit-variance inputs give unit-variance pre-activations, which keeps
        # GELU/SiLU in their non-linear range and breaks the symmetry between hidden units.
        return 1.0 / math.sqrt(fan_in)

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
        shapes = self.weight_shapes()
        if not isinstance(weights, dict) or set(weights) != set(shapes):
            got = sorted(weights) if isinstance(weights, dict) else type(weights).__name__
            raise ValueError(f"{name} must be a dict with keys {sorted(shapes)}, got {got}")
        lead = 3 if batched else 2
        for key, (d_in, d_out) in shapes.items():
            w = weights[key]
            want = ("B, H, " if batched else "H, ") + f"{d_in}, {d_out}"
            if not isinstance(w, torch.Tensor):
                raise ValueError(f"{name}[{key!r}] must be a [{want}] tensor, got {type(w)}")
            if w.ndim != lead + 1 or tuple(w.shape[-2:]) != (d_in, d_out):
                raise ValueError(f"{name}[{key!r}] must be [{want}], got {list(w.shape)}")
            if not w.is_floating_point():
                raise ValueError(f"{name}[{key!r}] must be floating point, got {w.dtype}")

    def forward(self, weights: TensorDict, x: torch.Tensor) -> torch.Tensor:
        """Read the memory: x ``[B, H, N, Dk]`` -> ``[B, H, N, Dv]``."""
        return self.forward_with(lambda name, h: h @ weights[name], x)

    @property
    def hidden_dim(self) -> int:
        """Hidden width of an MLP memory: ``expansion * dim_in``."""
        return int(self.expansion * self.dim_in)

    def _check_hidden_and_residual(self) -> None:
        check_number("expansion", self.expansion, 0.0)
        if not math.isfinite(self.expansion):
            raise ValueError(f"expansion must be finite, got {self.expansion}")
        check_choice("residual", self.residual, (False, True))
        if self.hidden_dim < 1:
            raise ValueError(f"expansion must give a hidden width >= 1, got {self.expansion}")
        if self.residual and self.dim_in != self.dim_out:
            raise ValueError(
                f"residual=True needs dim_in == dim_out, got dim_in={self.dim_in}, "
                f"dim_out={self.dim_out}"
            )


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        check_int(name, value, 1)


@dataclass(frozen=True)
class LinearMemory(MemoryModel):
    """f(W, x) = x W1 -- the linear associative memory (delta-rule family)."""

    dim_in: int
    dim_out: int

    def __post_init__(self) -> None:
        _check_positive(dim_in=self.dim_in, dim_out=self.dim_out)

    def weight_shapes(self) -> dict[str, tuple[int, int]]:
        return {"w1": (self.dim_in, self.dim_out)}

    def _init_std(self, name: str, fan_in: int) -> float:
        return 0.0  # an empty associative memory: reads return 0 until something is written

    def forward_with(self, linear: Linear, x: torch.Tensor) -> torch.Tensor:
        return linear("w1", x)

    def grad_factors(self, weights: TensorDict, k: torch.Tensor, v: torch.Tensor) -> Factors:
        return {"w1": (k, k @ weights["w1"] - v)}


@dataclass(frozen=True)
class MLPMemory(MemoryModel):
    """f(W, x) = sigma(... sigma(x W1) ...) WL, optionally + x (needs dim_in == dim_out)."""

    dim_in: int
    dim_out: int
    expansion: float = 4
    depth: int = 2
    activation: str = "gelu"
    residual: bool = False

    def __post_init__(self) -> None:
        _check_positive(dim_in=self.dim_in, dim_out=self.dim_out)
        if self.depth == 1:
            raise ValueError("depth must be >= 2 (use LinearMemory for depth 1), got 1")
        check_int("depth", self.depth, 2)
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        self._check_hidden_and_residual()

    def weight_shapes(self) -> dict[str, tuple[int, int]]:
        widths = [self.dim_in] + [self.hidden_dim] * (self.depth - 1) + [self.dim_out]
        return {f"w{i + 1}": (widths[i], widths[i + 1]) for i in range(self.depth)}

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
class GatedMLPMemory(MemoryModel):
    """f(W, x) = (silu(x Wg) * (x Wu)) Wd, optionally + x -- the SwiGLU memory of ATLAS++."""

    dim_in: int
    dim_out: int
    expansion: float = 4
    residual: bool = False

    def __post_init__(self) -> None:
        _check_positive(dim_in=self.dim_in, dim_out=self.dim_out)
        self._check_hidden_and_residual()

    def weight_shapes(self) -> dict[str, tuple[int, int]]:
        hidden = self.hidden_dim
        return {
            "gate": (self.dim_in, hidden),
            "up": (self.dim_in, hidden),
            "down": (hidden, self.dim_out),
        }

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
