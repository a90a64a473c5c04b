"""What a memory model *is*, without a framework: its dimensions, the names and shapes of its
weights in forward order, their init rule, the checks of its settings, and its maths --
``forward_with`` and the analytic inner gradient ``grad_factors`` -- written with array
operators (``@``, ``*``, ``+``) and three backend hooks (``_activation``,
``_activation_with_slope``, ``_transpose``). The torch models (``ops/memory_models.py``) and
their MLX mirror (``mlx/ops/memory_models.py``) subclass these specs and add only what needs
the framework: the hooks, ``init_weights``, ``initial_state`` and ``check_weights``.

Every model is written once, in ``forward_with(linear, x)``, against a callback
``linear(name, h)`` that multiplies ``h`` by weight ``name``. ``forward`` passes a plain
matmul; the chunked scan passes a callback that applies each token's *updated* weights
through the dual form (so layer 2 of an MLP reads through layer 1's updated output) without
ever building them. ``grad_factors`` is the inner gradient of ``0.5 * ||f(W, k) - v||^2``:
for every weight it is a rank-1 outer product per token, ``grad_W = a^T b``, returned as the
pair ``(a, b)``, ``a`` ``[B, H, N, d_in]``, ``b`` ``[B, H, N, d_out]``.

Shapes: a weight ``name`` is ``[H, d_in, d_out]`` (learned initial weights) or
``[B, H, d_in, d_out]`` (a stream's weights) with ``(d_in, d_out) = weight_shapes()[name]``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..validation import check_choice, check_int, check_number

ACTIVATIONS = ("gelu", "silu")
# How an MLP memory's last weight starts: ``output_init`` is its std as a multiple of LeCun's,
# 1 drawing it like the other weights and 0 starting it at zero, so that an untrained memory
# reads 0 (a residual one its key) as the linear memory does. The names stand for those two.
OUTPUT_INITS = {"lecun": 1.0, "zero": 0.0}


MAX_OUTPUT_INIT = 10.0  # 10x LeCun's std; far past it the first reads overflow to NaN


def output_init_scale(value: Any) -> float:
    """``output_init`` as the number it means: a finite number >= 0 (the last weight's std as
    a multiple of LeCun's), or "lecun" (1) / "zero" (0); ValueError naming it otherwise."""
    if isinstance(value, str) and value in OUTPUT_INITS:
        return OUTPUT_INITS[value]
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            scale = float(value)
        except OverflowError:  # an int past float's range
            scale = math.inf
        if math.isfinite(scale) and 0 <= scale <= MAX_OUTPUT_INIT:
            return scale + 0.0  # -0.0 -> 0.0
    raise ValueError(
        f"output_init must be a number in [0, {MAX_OUTPUT_INIT:g}] (the last weight's std as a "
        "multiple of LeCun's) "
        f"or one of {tuple(OUTPUT_INITS)}, got {value!r}"
    )


Linear = Callable[[str, Any], Any]  # linear(name, h) = h @ W[name], or what stands for it
Factors = dict[str, tuple[Any, Any]]  # name -> (a, b): grad_W of token n = a_n^T b_n


class MemorySpec:
    """Shared settings and checks of the memory models; subclasses name their weights."""

    dim_in: int
    dim_out: int
    residual: bool = False
    output_init: float = 1.0

    def weight_shapes(self) -> dict[str, tuple[int, int]]:
        """name -> (d_in, d_out) of every weight, in forward order."""
        raise NotImplementedError

    def forward_with(self, linear: Linear, x: Any) -> Any:
        """f(W, x) with every ``h @ W[name]`` delegated to ``linear(name, h)``."""
        raise NotImplementedError

    def grad_factors(self, weights: dict[str, Any], k: Any, v: Any) -> Factors:
        """Per-token rank-1 factors of grad_W 0.5||f(W, k) - v||^2: name -> (a, b)."""
        raise NotImplementedError

    def forward(self, weights: dict[str, Any], x: Any) -> Any:
        """Read the memory: x ``[B, H, N, Dk]`` -> ``[B, H, N, Dv]``, with weights per head
        ``[H, d_in, d_out]`` or per stream ``[B, H, d_in, d_out]`` (both checked: a bad one
        was a KeyError or a bare matmul error from the backend)."""
        if not hasattr(x, "shape") or x.ndim != 4 or x.shape[-1] != self.dim_in:
            got = list(x.shape) if hasattr(x, "shape") else type(x).__name__
            raise ValueError(f"x must be [B, H, N, {self.dim_in}] (the memory's dim_in), got {got}")
        if not isinstance(weights, dict) and hasattr(weights, "items"):
            weights = dict(weights.items())  # a layer's initial weights (an nn.ParameterDict)
        batched = isinstance(weights, dict) and any(
            getattr(w, "ndim", 0) == 4 for w in weights.values()
        )
        self.check_weights(weights, batched=batched, name="weights")
        lead = tuple(x.shape[:2]) if batched else (x.shape[1],)
        for key, w in weights.items():  # no silent broadcast of heads or streams
            if tuple(w.shape[:-2]) != lead:
                raise ValueError(
                    f"weights[{key!r}] must lead with {list(lead)} ([B, H] or [H] of x "
                    f"{list(x.shape)}), got {list(w.shape)}"
                )
        return self.read(weights, x)

    def read(self, weights: dict[str, Any], x: Any) -> Any:
        """``forward`` without its checks: the scans' per-token reads, whose weights are the
        checked state's."""
        return self.forward_with(lambda name, h: h @ weights[name], x)

    # The backend's array hooks: act(z); (act(z), act'(z)); W^T over the last two axes.
    def _activation(self, name: str, z: Any) -> Any:
        raise NotImplementedError

    def _activation_with_slope(self, name: str, z: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def _transpose(self, weight: Any) -> Any:
        raise NotImplementedError

    def _init_std(self, name: str, fan_in: int) -> float:
        # LeCun normal: unit-variance inputs give unit-variance pre-activations, which keeps
        # GELU/SiLU in their non-linear range and breaks the symmetry between hidden units.
        std = 1.0 / math.sqrt(fan_in)
        # The last weight at output_init x LeCun's: what the untrained memory reads is a random
        # function of the key that a first write has to outgrow (at LeCun's scale unit-norm
        # keys read back at norm ~0.5 where writing 4 pairs moves the read ~0.15; at 0 there is
        # none; research/LOG.md, sections 16 and 17).
        if name == list(self.weight_shapes())[-1]:
            return self.output_init * std
        return std

    @property
    def hidden_dim(self) -> int:
        """Hidden width of an MLP memory: ``expansion * dim_in``."""
        return int(self.expansion * self.dim_in)

    def check_weight_dict(
        self, weights: Any, *, batched: bool, name: str, is_array: type, floating: Any
    ) -> None:
        """Raise ValueError unless ``weights`` has exactly this model's names and shapes, as
        floating-point arrays of type ``is_array`` (``floating(w)`` says whether one is)."""
        shapes = self.weight_shapes()
        if not isinstance(weights, dict) or set(weights) != set(shapes):
            got = sorted(weights) if isinstance(weights, dict) else type(weights).__name__
            raise ValueError(f"{name} must be a dict with keys {sorted(shapes)}, got {got}")
        lead = 3 if batched else 2
        for key, (d_in, d_out) in shapes.items():
            w = weights[key]
            want = ("B, H, " if batched else "H, ") + f"{d_in}, {d_out}"
            if not isinstance(w, is_array):
                raise ValueError(f"{name}[{key!r}] must be a [{want}] array, got {type(w)}")
            if w.ndim != lead + 1 or tuple(w.shape[-2:]) != (d_in, d_out):
                raise ValueError(f"{name}[{key!r}] must be [{want}], got {list(w.shape)}")
            if not floating(w):
                raise ValueError(f"{name}[{key!r}] must be floating point, got {w.dtype}")

    def _check_mlp_settings(self) -> None:
        # frozen dataclasses: store the name's number ("lecun" -> 1.0) once, checked
        object.__setattr__(self, "output_init", output_init_scale(self.output_init))
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
class LinearSpec(MemorySpec):
    """f(W, x) = x W1 -- the linear associative memory (delta-rule family)."""

    dim_in: int
    dim_out: int

    def __post_init__(self) -> None:
        _check_positive(dim_in=self.dim_in, dim_out=self.dim_out)

    def weight_shapes(self) -> dict[str, tuple[int, int]]:
        return {"w1": (self.dim_in, self.dim_out)}

    def _init_std(self, name: str, fan_in: int) -> float:
        return 0.0  # an empty associative memory: reads return 0 until something is written

    def forward_with(self, linear: Linear, x: Any) -> Any:
        return linear("w1", x)

    def grad_factors(self, weights: dict[str, Any], k: Any, v: Any) -> Factors:
        return {"w1": (k, k @ weights["w1"] - v)}


@dataclass(frozen=True)
class MLPSpec(MemorySpec):
    """f(W, x) = sigma(... sigma(x W1) ...) WL, optionally + x (needs dim_in == dim_out)."""

    dim_in: int
    dim_out: int
    expansion: float = 4
    depth: int = 2
    activation: str = "gelu"
    residual: bool = False
    output_init: float = 1.0  # the last weight's std / LeCun's ("lecun" = 1, "zero" = 0)

    def __post_init__(self) -> None:
        _check_positive(dim_in=self.dim_in, dim_out=self.dim_out)
        if self.depth == 1:
            raise ValueError("depth must be >= 2 (use LinearMemory for depth 1), got 1")
        check_int("depth", self.depth, 2)
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        self._check_mlp_settings()

    def weight_shapes(self) -> dict[str, tuple[int, int]]:
        widths = [self.dim_in] + [self.hidden_dim] * (self.depth - 1) + [self.dim_out]
        return {f"w{i + 1}": (widths[i], widths[i + 1]) for i in range(self.depth)}

    def forward_with(self, linear: Linear, x: Any) -> Any:
        h = x
        for i in range(1, self.depth + 1):
            h = linear(f"w{i}", h)
            if i < self.depth:
                h = self._activation(self.activation, h)
        return h + x if self.residual else h

    def grad_factors(self, weights: dict[str, Any], k: Any, v: Any) -> Factors:
        inputs, slopes = [k], []  # inputs[i] feeds w{i+1}; slopes[i] = act'(inputs[i] @ w{i+1})
        for i in range(1, self.depth):
            pre_activation = inputs[-1] @ weights[f"w{i}"]
            hidden, slope = self._activation_with_slope(self.activation, pre_activation)
            inputs.append(hidden)
            slopes.append(slope)
        out = inputs[-1] @ weights[f"w{self.depth}"]
        delta = out + k - v if self.residual else out - v  # d loss / d out
        factors = {f"w{self.depth}": (inputs[-1], delta)}
        for i in range(self.depth - 1, 0, -1):
            delta = (delta @ self._transpose(weights[f"w{i + 1}"])) * slopes[i - 1]
            factors[f"w{i}"] = (inputs[i - 1], delta)
        return {name: factors[name] for name in self.weight_shapes()}  # w1 first, as initialised


@dataclass(frozen=True)
class GatedMLPSpec(MemorySpec):
    """f(W, x) = (silu(x Wg) * (x Wu)) Wd, optionally + x -- the SwiGLU memory of ATLAS++."""

    dim_in: int
    dim_out: int
    expansion: float = 4
    residual: bool = False
    output_init: float = 1.0  # ``down``'s std / LeCun's ("lecun" = 1, "zero" = 0)

    def __post_init__(self) -> None:
        _check_positive(dim_in=self.dim_in, dim_out=self.dim_out)
        self._check_mlp_settings()

    def weight_shapes(self) -> dict[str, tuple[int, int]]:
        hidden = self.hidden_dim
        return {
            "gate": (self.dim_in, hidden),
            "up": (self.dim_in, hidden),
            "down": (hidden, self.dim_out),
        }

    def _init_std(self, name: str, fan_in: int) -> float:
        # The layer feeds unit-norm keys (entries ~ Dk^-1/2), not the unit-variance inputs
        # LeCun's scale is made for, so pre-activations start at std s = Dk^-1/2. An MLP's
        # hidden units are first order in s (gelu(z) ~ z / 2), the gated product silu(zg) zu
        # second order (~ s^2 / 2): with LeCun's gate and up, a Muon step (which sets how
        # far the weights move, not the read) moved the gated read 4.5x less than the MLP's
        # (Dk = 32, research/LOG.md). Gate and up at fan_in^-1/4 give pre-activations of
        # std Dk^-1/4 and hidden units the size of the MLP's.
        if name in ("gate", "up"):
            return fan_in**-0.25
        return super()._init_std(name, fan_in)

    def forward_with(self, linear: Linear, x: Any) -> Any:
        hidden = self._activation("silu", linear("gate", x)) * linear("up", x)
        out = linear("down", hidden)
        return out + x if self.residual else out

    def grad_factors(self, weights: dict[str, Any], k: Any, v: Any) -> Factors:
        up = k @ weights["up"]
        gate_act, gate_slope = self._activation_with_slope("silu", k @ weights["gate"])
        hidden = gate_act * up
        out = hidden @ weights["down"]
        delta = out + k - v if self.residual else out - v
        d_hidden = delta @ self._transpose(weights["down"])
        return {
            "gate": (k, d_hidden * up * gate_slope),
            "up": (k, d_hidden * gate_act),
            "down": (hidden, delta),
        }


def build_memory(config: Any, key_dim: int, value_dim: int, classes: dict[str, type]) -> Any:
    """The memory model a layer's ``MemoryConfig`` asks for, from one backend's ``classes``
    (``"linear"`` / ``"mlp"`` / ``"gated_mlp"`` -> its model class), keys of ``key_dim`` and
    values of ``value_dim``; ValueError for a residual memory whose widths differ."""
    if config.residual and key_dim != value_dim:
        raise ValueError(
            f"residual memory needs key width == value width, got {key_dim} != {value_dim} "
            "(a polynomial feature map widens keys: set feature_projection=True or residual=False)"
        )
    if config.model == "linear":
        return classes["linear"](dim_in=key_dim, dim_out=value_dim)
    if config.model == "mlp":
        return classes["mlp"](
            dim_in=key_dim,
            dim_out=value_dim,
            expansion=config.expansion,
            depth=config.depth,
            activation=config.activation,
            residual=config.residual,
            output_init=config.output_init,
        )
    return classes["gated_mlp"](
        dim_in=key_dim,
        dim_out=value_dim,
        expansion=config.expansion,
        residual=config.residual,
        output_init=config.output_init,
    )
