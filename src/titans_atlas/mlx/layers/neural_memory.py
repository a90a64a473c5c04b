"""The memory layer in MLX (mirrors ``titans_atlas.layers.neural_memory``; spec:
docs/architectures.md, "The memory layer").

Axes: B batch, T tokens, D model width, H heads, Dh head width, Dk key width after the
feature map, c Omega window.

x -> q, k, v projections -> causal depthwise conv -> SiLU -> L2-normalise q, k -> optional
polynomial map -> per-token gates from x -> memory_scan -> per-head RMSNorm -> output gate ->
output projection. The settings come from the torch side's ``MemoryConfig``, read through
``scan_options`` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn

from ...common.feature_maps import polynomial_width
from ...common.memory_layer import (  # noqa: F401  (scan_options, update_rule: re-exported)
    MemoryLayerRules,
    scan_options,
    update_rule,
)
from ...common.memory_models import build_memory
from ...layers.memory_config import SHIFTED_CONV_LAGS
from ...layers.neural_memory import MemoryConfig
from ...validation import check_heads
from ..ops import (
    MemoryState,
    default_polynomial_coefficients,
    memory_scan,
    polynomial_features,
)
from ..ops.memory_models import MEMORY_CLASSES, silu
from .basic import CausalConv, normal_init


@dataclass
class MemoryLayerState:
    """A memory layer's stream: the memory itself and the conv caches (by stream name; with
    Omega gates taken from the tap's token, "omega" holds the last c-1 tokens' gates)."""

    memory: MemoryState
    conv: dict[str, mx.array] = field(default_factory=dict)


def l2_normalize(x: mx.array, eps: float = 1e-12) -> mx.array:
    """``torch.nn.functional.normalize(x, dim=-1)``: x / max(||x||, eps), with torch's zero
    gradient at x = 0 (the max inside the root: sqrt's derivative at 0 would be inf, and a
    zero vector is common -- a key delayed past the stream start, ``qk_init="shifted"``)."""
    squared = (x * x).sum(axis=-1, keepdims=True)
    return x * mx.rsqrt(mx.maximum(squared, eps * eps))


class NeuralMemory(MemoryLayerRules, nn.Module):
    """``(x [B, T, D], state) -> (y [B, T, D], state)``; state is explicit data."""

    polynomial_features = staticmethod(polynomial_features)
    array_like = staticmethod(lambda values, like: mx.array(values, dtype=like.dtype))

    def __init__(self, dim: int, num_heads: int, config: MemoryConfig) -> None:
        super().__init__()
        check_heads(dim, num_heads)
        self.config, self.num_heads = config, num_heads
        self.impl, self.compiled, self.validate = "auto", True, True  # runtime (set_runtime)
        head_dim = self.head_dim = dim // num_heads
        width = head_dim * num_heads
        self.to_qkv = nn.Linear(dim, 3 * width, bias=False)
        # the torch NeuralMemory.init_weights says why
        matched = config.qk_init in ("matched", "shifted")
        self.conv = {n: CausalConv(width, config.conv_kernel, matched) for n in "qkv"}
        if config.qk_init == "shifted":
            for name, lag in SHIFTED_CONV_LAGS.items():
                self.conv[name].conv.init_shift(lag)
        self.omega_gates = config.omega_window if config.omega_window > 1 else 0
        self.to_gates = nn.Linear(dim, num_heads * (3 + self.omega_gates))
        self._init_gates()
        key_dim = head_dim
        if config.feature_map == "polynomial":
            self.poly_coefficients = default_polynomial_coefficients(config.poly_degree)
            key_dim = polynomial_width(head_dim, config.poly_degree)
            if config.feature_projection:
                self.feature_projection = nn.Linear(key_dim, head_dim, bias=False)
                init_feature_projection(self.feature_projection)
                key_dim = head_dim
        self.memory = build_memory(config, key_dim, head_dim, MEMORY_CLASSES)
        self.initial_weights = self.memory.init_weights(num_heads)
        self.out_norm = nn.RMSNorm(head_dim, eps=1e-6)
        self.to_out_gate = nn.Linear(dim, width, bias=False)
        self.to_out = nn.Linear(width, dim, bias=False)
        for linear in (self.to_qkv, self.to_out_gate, self.to_out):
            normal_init(linear)
        if matched:  # the query rows of to_qkv start as a copy of the key rows
            rows = self.to_qkv.weight
            self.to_qkv.weight = mx.concatenate([rows[width : 2 * width], rows[width:]], axis=0)

    def _init_gates(self) -> None:
        """Small weights and biases that give the configured untrained gates."""
        normal_init(self.to_gates)
        self.to_gates.bias = mx.repeat(mx.array(self.config.gate_biases()), self.num_heads)

    def initial_state(self, batch_size: int) -> MemoryLayerState:
        return MemoryLayerState(memory=self.memory.initial_state(self.initial_weights, batch_size))

    def _split_heads(self, x: mx.array) -> mx.array:
        return x.reshape(*x.shape[:2], self.num_heads, -1)  # [B, T, H*Dh] -> [B, T, H, Dh]

    def _features(self, x: mx.array) -> mx.array:
        """SiLU -> L2 norm -> optional polynomial map per head: [B, T, H*Dh] -> [B, T, H, Dk]."""
        return self._feature_map(l2_normalize(silu(self._split_heads(x))))

    def _gates(self, x: mx.array):
        raw = mx.sigmoid(self.to_gates(x))  # [B, T, (G H)]
        raw = raw.reshape(*x.shape[:2], -1, self.num_heads).swapaxes(-1, -2)  # [B, T, H, G]
        return self.bounded_gates(raw)

    def output(self, read: mx.array, x: mx.array) -> mx.array:
        """Per-head RMSNorm of the reads ``[B, T, H, Dh]``, output gate from x, projection."""
        read = self.out_norm(read.astype(self.out_norm.weight.dtype))
        read = read.reshape(*read.shape[:2], -1)  # [B, T, H*Dh]
        gate = self.to_out_gate(x)
        gate = mx.sigmoid(gate) if self.config.output_gate == "sigmoid" else silu(gate)
        return self.to_out(read * gate)

    def __call__(
        self, x: mx.array, state: MemoryLayerState | None = None
    ) -> tuple[mx.array, MemoryLayerState]:
        if state is None:
            state = self.initial_state(x.shape[0])
        conv = dict(state.conv)  # a forward never mutates the caller's state
        q, k, v = mx.split(self.to_qkv(x), 3, axis=-1)
        q, conv["q"] = self._query_features(q, conv.get("q"))
        k, conv["k"] = self.conv["k"](k, conv.get("k"))
        v, conv["v"] = self.conv["v"](v, conv.get("v"))
        k = self._features(k)
        v = self._split_heads(silu(v))
        lr, momentum, decay, omega = self._gates(x)
        if omega is not None and self.config.omega_gate_source == "tap":
            omega, conv["omega"] = gates_by_tap(omega, conv.get("omega"))
        runtime = {"impl": self.impl, "compiled": self.compiled, "validate": self.validate}
        gates = (lr, momentum, decay, omega)
        read, memory = self._scan(memory_scan, q, k, v, gates, state.memory, **runtime)
        return self.output(read, x), MemoryLayerState(memory=memory, conv=conv)

    def retrieve(
        self, x: mx.array, weights: dict, conv_cache: mx.array | None
    ) -> tuple[mx.array, mx.array]:
        """Read memory ``weights`` ``[B, H, ...]`` with queries from x, no update (MAC eq. 21).
        Returns ``[B, T, D]`` and the query conv cache of this stream."""
        width = self.head_dim * self.num_heads
        q, conv_cache = self._query_features(x @ self.to_qkv.weight[:width].T, conv_cache)
        q = q.swapaxes(1, 2).astype(next(iter(weights.values())).dtype)  # [B, H, T, Dk]
        read = self.memory.read(weights, q).swapaxes(1, 2)  # [B, T, H, Dv]
        return self.output(read, x), conv_cache


def init_feature_projection(linear: nn.Linear) -> None:
    """N(0, 0.02) plus the identity on phi's degree-1 block, so untrained projected keys keep
    unit norm (the torch layer's ``init_feature_projection`` says why)."""
    normal_init(linear)
    head_dim, width = linear.weight.shape
    identity = mx.pad(mx.eye(head_dim), [(0, 0), (1, width - 1 - head_dim)])  # columns 1..Dh
    linear.weight = linear.weight + identity


def gates_by_tap(gates: mx.array, history: mx.array | None) -> tuple[mx.array, mx.array]:
    """``gamma[t, j] = gates[t - j, j]`` for ``gates [B, T, H, c]``, and the last c-1 rows
    ``[B, c-1, H, c]`` for the next piece (the torch layer's ``gates_by_tap``)."""
    steps, window = gates.shape[1], gates.shape[-1]
    if history is None:
        history = mx.zeros((gates.shape[0], window - 1, *gates.shape[2:]), dtype=gates.dtype)
    rows = mx.concatenate([history.astype(gates.dtype), gates], axis=1)  # [B, c-1+T, H, c]
    start = [window - 1 - j for j in range(window)]  # tap j at step t reads row c-1 + t - j
    gamma = mx.stack([rows[:, s : s + steps, :, j] for j, s in enumerate(start)], axis=-1)
    return gamma, rows[:, rows.shape[1] - (window - 1) :]
