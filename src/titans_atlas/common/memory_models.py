"""What a memory model *is*, without arrays: its dimensions, the names and shapes of its
weights in forward order, their init rule, and the checks of its settings. The torch models
(``ops/memory_models.py``) and their MLX mirror (``mlx/ops/memory_models.py``) subclass these
specs and add only the array code (``forward_with``, ``grad_factors``, ``init_weights``).

Shapes: a weight ``name`` is ``[H, d_in, d_out]`` (learned initial weights) or
``[B, H, d_in, d_out]`` (a stream's weights) with ``(d_in, d_out) = weight_shapes()[name]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..validation import check_choice, check_int, check_number

ACTIVATIONS = ("gelu", "silu")


class MemorySpec:
    """Shared settings and checks of the memory models; subclasses name their weights."""

    dim_in: int
    dim_out: int
    residual: bool = False

    def weight_shapes(self) -> dict[str, tuple[int, int]]:
        """name -> (d_in, d_out) of every weight, in forward order."""
        raise NotImplementedError

    def _init_std(self, name: str, fan_in: int) -> float:
        # LeCun normal: unit-variance inputs give unit-variance pre-activations, which keeps
        # GELU/SiLU in their non-linear range and breaks the symmetry between hidden units.
        return 1.0 / math.sqrt(fan_in)

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


@dataclass(frozen=True)
class MLPSpec(MemorySpec):
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


@dataclass(frozen=True)
class GatedMLPSpec(MemorySpec):
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
        )
    return classes["gated_mlp"](
        dim_in=key_dim, dim_out=value_dim, expansion=config.expansion, residual=config.residual
    )
