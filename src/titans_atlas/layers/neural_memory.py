"""The memory layer (docs/architectures.md, "The memory layer"; Titans 4.4, ATLAS 5).

Axes: B batch, T tokens, D model width, H heads, Dh head width, Dk key width after the
feature map, c Omega window.

x -> q, k, v projections -> causal depthwise conv (own streaming caches) -> SiLU ->
L2-normalise q, k -> optional polynomial map -> per-token gates from x -> memory_scan ->
per-head RMSNorm -> output gate -> output projection.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ..common.feature_maps import polynomial_width
from ..common.memory_layer import MemoryLayerRules
from ..common.memory_models import build_memory
from ..ops import (
    SCAN_IMPLS,
    MemoryState,
    default_polynomial_coefficients,
    memory_scan,
    polynomial_features,
)
from ..ops.memory_models import MEMORY_CLASSES
from ..validation import check_bool, check_choice, check_heads
from .basic import CausalConv
from .hooks import MemoryRead, MemoryWrite, new_hook_table, run_hooks
from .memory_config import SHIFTED_CONV_LAGS, MemoryConfig


@dataclass
class MemoryLayerState:
    """A memory layer's stream: the memory itself, the causal-conv caches of q, k, v
    (``[B, K-1, H*Dh]`` each) and, for Omega gates taken from the tap's token, the last c-1
    tokens' gates (``[B, c-1, H, c]``); each None before the first token."""

    memory: MemoryState
    conv_q: torch.Tensor | None = None
    conv_k: torch.Tensor | None = None
    conv_v: torch.Tensor | None = None
    omega: torch.Tensor | None = None


class NeuralMemory(MemoryLayerRules, nn.Module):
    """``forward(x [B, T, D], state) -> (y [B, T, D], state)``; state is explicit data.

    Run-time choices live on the module, not in the config (they are never saved with the
    weights): ``impl`` ("auto" | "chunk" | "reference" | "token" | "triton") and ``checkpoint``
    (recompute each chunk in backward), set with ``set_runtime``.
    """

    polynomial_features = staticmethod(polynomial_features)
    array_like = staticmethod(lambda values, like: like.new_tensor(values))

    def __init__(self, dim: int, num_heads: int, config: MemoryConfig) -> None:
        super().__init__()
        check_heads(dim, num_heads)
        self.memory_hooks = new_hook_table()  # register_memory_hook (layers/hooks.py)
        self.config, self.num_heads = config, num_heads
        self.impl, self.checkpoint = "auto", False
        head_dim = self.head_dim = dim // num_heads
        width = head_dim * num_heads
        self.to_qkv = nn.Linear(dim, 3 * width, bias=False)
        self.conv = nn.ModuleDict({n: CausalConv(width, config.conv_kernel) for n in "qkv"})
        self.omega_gates = config.omega_window if config.omega_window > 1 else 0
        self.to_gates = nn.Linear(dim, num_heads * (3 + self.omega_gates))
        key_dim = head_dim
        if config.feature_map == "polynomial":
            self.poly_coefficients = nn.Parameter(torch.empty(config.poly_degree + 1))
            key_dim = polynomial_width(head_dim, config.poly_degree)
            if config.feature_projection:
                self.feature_projection = nn.Linear(key_dim, head_dim, bias=False)
                key_dim = head_dim
        self.memory = build_memory(config, key_dim, head_dim, MEMORY_CLASSES)
        self.initial_weights = nn.ParameterDict(
            {
                name: nn.Parameter(torch.empty(num_heads, *shape))
                for name, shape in self.memory.weight_shapes().items()
            }
        )
        self.out_norm = nn.RMSNorm(head_dim, eps=1e-6)
        self.to_out_gate = nn.Linear(dim, width, bias=False)
        self.to_out = nn.Linear(width, dim, bias=False)
        self.init_weights()

    def set_runtime(self, impl: str | None = None, checkpoint: bool | None = None) -> None:
        """Choose how ``memory_scan`` runs (None leaves a choice as it is)."""
        if impl is not None:
            check_choice("memory_impl", impl, SCAN_IMPLS)
            self.impl = impl
        if checkpoint is not None:
            check_bool("memory_checkpoint", checkpoint)
            self.checkpoint = checkpoint

    @torch.no_grad()
    def init_weights(self, std: float = 0.02, out_std: float | None = None) -> None:
        """Initialise every parameter in place: projections N(0, std), the output projection
        N(0, out_std) (default std), gates that give the configured untrained gate values,
        memory weights from the memory model's own initialiser.

        ``config.qk_init``: "matched" copies the key rows of ``to_qkv`` into the query rows and
        starts the convolutions with non-negative taps and no bias (``CausalConv.init_weights``);
        "shifted" (the default) does the same copy and starts the convolutions as delays --
        the key conv passes the previous token, the query and value convs the current one --
        so the untrained memory writes value x_t at the address of x_{t-1} and a query at a
        token reads what followed that token last time: the address the memory must learn is
        there from step 0 and training refines it instead of having to find it
        (docs/architectures.md, "Initialisation")."""
        out_std = std if out_std is None else out_std
        for linear in (self.to_qkv, self.to_out_gate):
            nn.init.normal_(linear.weight, std=std)
        nn.init.normal_(self.to_out.weight, std=out_std)
        matched = self.config.qk_init in ("matched", "shifted")
        if matched:
            width = self.to_qkv.weight.shape[0] // 3  # rows: [q | k | v]
            self.to_qkv.weight[:width] = self.to_qkv.weight[width : 2 * width]
        for conv in self.conv.values():
            conv.init_weights(matched=matched)
        if self.config.qk_init == "shifted":
            for name, lag in SHIFTED_CONV_LAGS.items():
                self.conv[name].init_shift(lag)
        self.out_norm.reset_parameters()
        self._init_gates()
        if self.config.feature_map == "polynomial":
            coefficients = default_polynomial_coefficients(self.config.poly_degree)
            self.poly_coefficients.copy_(coefficients)
            if self.config.feature_projection:
                init_feature_projection(self.feature_projection.weight, std)
        fresh = self.memory.init_weights(self.num_heads, device=self.to_qkv.weight.device)
        for name, weight in self.initial_weights.items():
            weight.copy_(fresh[name])

    def _init_gates(self) -> None:
        """Small weights and biases that give the configured untrained gates."""
        nn.init.normal_(self.to_gates.weight, std=0.02)
        bias = torch.tensor(self.config.gate_biases(), device=self.to_gates.bias.device)
        self.to_gates.bias.copy_(bias.repeat_interleave(self.num_heads))

    def initial_state(self, batch_size: int) -> MemoryLayerState:
        weights = dict(self.initial_weights.items())
        return MemoryLayerState(memory=self.memory.initial_state(weights, batch_size))

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        """SiLU -> L2 norm -> optional polynomial map per head: [B, T, H*Dh] -> [B, T, H, Dk]."""
        x = F.normalize(F.silu(rearrange(x, "b t (h d) -> b t h d", h=self.num_heads)), dim=-1)
        return self._feature_map(x)

    def _gates(self, x: torch.Tensor):
        """The bounded gates from x: theta, eta, alpha ``[B, T, H]``, gamma ``[B, T, H, c]``
        or None (``MemoryLayerRules.bounded_gates``)."""
        raw = rearrange(torch.sigmoid(self.to_gates(x)), "b t (g h) -> b t h g", h=self.num_heads)
        return self.bounded_gates(raw)

    def output(self, read: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Per-head RMSNorm of the reads ``[B, T, H, Dh]``, output gate from x, projection."""
        read = rearrange(self.out_norm(read.to(self.out_norm.weight.dtype)), "b t h d -> b t (h d)")
        gate = self.to_out_gate(x)
        gate = torch.sigmoid(gate) if self.config.output_gate == "sigmoid" else F.silu(gate)
        return self.to_out(read * gate)

    def forward(
        self, x: torch.Tensor, state: MemoryLayerState | None = None
    ) -> tuple[torch.Tensor, MemoryLayerState]:
        if state is None:
            state = self.initial_state(x.shape[0])
        q, k, v = self.to_qkv(x).split(self.head_dim * self.num_heads, dim=-1)
        q, conv_q = self._query_features(q, state.conv_q)
        k, conv_k = self.conv["k"](k, state.conv_k)
        v, conv_v = self.conv["v"](v, state.conv_v)
        k = self._features(k)
        v = rearrange(F.silu(v), "b t (h d) -> b t h d", h=self.num_heads)
        lr, momentum, decay, omega = self._gates(x)
        omega_cache = None
        if omega is not None and self.config.omega_gate_source == "tap":
            omega, omega_cache = gates_by_tap(omega, state.omega)
        # CUDA autocast runs the L2 norm in fp32 and the rest in bf16: q, k arrive fp32 beside
        # a bf16 v. The scan computes in the state's precision anyway; hand it one dtype.
        dtype = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        if self.memory_hooks:
            event = MemoryWrite(self, q, k, v, lr, momentum, decay, omega)
            event = run_hooks(self.memory_hooks, event)
            q, k, v, lr, momentum, decay, omega = (
                event.q, event.k, event.v, event.lr, event.momentum, event.decay, event.omega
            )  # fmt: skip
        gates = (lr, momentum, decay, omega)
        runtime = {"impl": self.impl, "checkpoint": self.checkpoint}
        read, memory = self._scan(memory_scan, q, k, v, gates, state.memory, **runtime)
        new_state = MemoryLayerState(
            memory, conv_q=conv_q, conv_k=conv_k, conv_v=conv_v, omega=omega_cache
        )
        return self.output(read, x), new_state

    def retrieve(
        self, x: torch.Tensor, weights: dict, conv_cache: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Read memory ``weights`` ``[B, H, ...]`` with queries from x, no update (MAC eq. 21).
        Returns ``[B, T, D]`` and the query conv cache of this stream."""
        width = self.head_dim * self.num_heads
        q, conv_cache = self._query_features(F.linear(x, self.to_qkv.weight[:width]), conv_cache)
        q = rearrange(q, "b t h d -> b h t d").to(next(iter(weights.values())).dtype)
        read = rearrange(self.memory.read(weights, q), "b h t d -> b t h d")
        output = self.output(read, x)
        if self.memory_hooks:
            output = run_hooks(self.memory_hooks, MemoryRead(self, x, output)).output
        return output, conv_cache


@torch.no_grad()
def init_feature_projection(weight: torch.Tensor, std: float) -> None:
    """``weight [Dh, C(Dh + p, p)]``: N(0, std) plus the identity on phi's degree-1 block
    (columns 1..Dh, after the constant). An untrained projection then passes the
    L2-normalised keys through at unit norm; noise alone at std 0.02 gives keys of norm ~0.16
    and writes ~40x weaker than the plain layer's, too weak to bind (docs/results.md)."""
    head_dim = weight.shape[0]
    nn.init.normal_(weight, std=std)
    weight[:, 1 : 1 + head_dim] += torch.eye(head_dim, dtype=weight.dtype, device=weight.device)


def gates_by_tap(
    gates: torch.Tensor, history: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Omega gates from the token each tap weights: ``gates [B, T, H, c]`` holds, in row s, the
    gate token s gives itself at each age j; returns ``gamma [B, T, H, c]`` with
    ``gamma[t, j] = gates[t - j, j]`` and the last c-1 rows ``[B, c-1, H, c]`` for the next
    piece of the stream. ``history``: those rows from the previous piece (None at the start of
    a stream, where the taps before the first token are dropped by the scan: zeros)."""
    steps, window = gates.shape[1], gates.shape[-1]
    if history is None:
        history = gates.new_zeros(gates.shape[0], window - 1, *gates.shape[2:])
    rows = torch.cat([history.to(gates.dtype), gates], dim=1)  # [B, c-1+T, H, c]
    # tap j at step t reads row t - j, which sits at c-1 + t - j in ``rows``
    start = [window - 1 - j for j in range(window)]
    gamma = torch.stack([rows[:, s : s + steps, :, j] for j, s in enumerate(start)], dim=-1)
    # a copy: a view would keep the whole piece's gates alive in the state
    return gamma, rows[:, rows.shape[1] - (window - 1) :].clone()
