"""What the torch memory layer (``layers/neural_memory.py``) and its MLX mirror share beyond
the array code: the bounds of the gates, the query path, the feature map's optional
polynomial step and the settings the layer hands ``memory_scan``.

Axes: B batch, T tokens, H heads, Dh head width, Dk key width, G gate channels (3, plus c
Omega taps).
"""

from __future__ import annotations

from typing import Any

LEGACY_MUON = {False: "momentum", True: "muon", "token": "muon", "chunk": "muon_chunk"}


def update_rule(config: Any) -> str:
    """The config's update rule, "momentum" | "muon" | "muon_chunk" (the one place that reads
    it: ``MemoryConfig.muon`` becomes ``update_rule``, TODO(#15))."""
    return getattr(config, "update_rule", None) or LEGACY_MUON[config.muon]


def scan_options(config: Any) -> dict[str, Any]:
    """The ``memory_scan`` keywords a ``MemoryConfig`` fixes (architecture, not runtime
    choices)."""
    return {
        "chunk_size": config.chunk_size,
        "omega_window": config.omega_window,
        "update_rule": update_rule(config),
        "read": config.read,
        "max_grad_norm": config.max_grad_norm,
    }


class MemoryLayerRules:
    """A mixin for both backends' ``NeuralMemory`` (which provide ``config``, ``conv``,
    ``memory``, ``initial_weights``, ``_features`` and, as class attributes, their
    ``polynomial_features`` and ``array_like(values, like)``: a list of floats as an array of
    ``like``'s dtype and device)."""

    config: Any

    def bounded_gates(self, raw: Any) -> tuple[Any, Any, Any, Any]:
        """``raw [B, T, H, G]`` in (0, 1) -> theta in (0, lr_max), eta in (0, momentum_max),
        alpha in (decay_min, 1), each ``[B, T, H]``, and gamma ``[B, T, H, c]`` in (0, 1)
        (None without an Omega window): the bounded gates of docs/architectures.md, theta
        and alpha then scaled per head where ``config.timescale_ratio`` is not 1 (theta by its
        own ``timescale_lr_ratio`` where that is set)."""
        config = self.config
        lr, momentum = raw[..., 0] * config.lr_max, raw[..., 1] * config.momentum_max
        decay = config.decay_min + (1 - config.decay_min) * raw[..., 2]
        if config.timescale_ratio != 1:  # per-head timescales: [H], from 1 down to 1/ratio
            heads = lr.shape[-1]
            lr = lr * self.array_like(config.lr_head_scales(heads), lr)
            decay = decay * self.array_like(config.head_scales(heads), lr)
        omega = raw[..., 3:] if config.omega_window > 1 else None
        return lr, momentum, decay, omega

    def _query_features(self, q: Any, cache: Any) -> tuple[Any, Any]:
        """The queries' causal conv (with its streaming cache), then the feature map."""
        q, cache = self.conv["q"](q, cache)
        return self._features(q), cache

    def _feature_map(self, x: Any) -> Any:
        """The optional polynomial map of the normalised features ``[B, T, H, Dh]`` -> ``[B, T,
        H, Dk]``, and its learned projection back to the head width."""
        if self.config.feature_map == "polynomial":
            x = self.polynomial_features(x, self.config.poly_degree, self.poly_coefficients)
            if self.config.feature_projection:
                x = self.feature_projection(x)
        return x

    def _scan(
        self, memory_scan: Any, q: Any, k: Any, v: Any, gates: tuple, state: Any, **runtime: Any
    ) -> tuple[Any, Any]:
        """The backend's ``memory_scan`` over q, k, v ``[B, T, H, D]`` with the bounded
        ``gates`` (theta, eta, alpha, gamma) from the memory ``state``: the config's settings,
        the decay toward the learned initial weights where ``decay_target="init"``, and the
        backend's ``runtime`` choices (impl, ...)."""
        lr, momentum, decay, omega = gates
        target = self.config.decay_target == "init"
        return memory_scan(
            self.memory, q, k, v, lr, momentum, decay, state,
            omega_gate=omega,
            decay_to=dict(self.initial_weights.items()) if target else None,
            **scan_options(self.config),
            **runtime,
        )  # fmt: skip
