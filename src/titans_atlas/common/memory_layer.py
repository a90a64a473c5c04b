"""What the torch memory layer (``layers/neural_memory.py``) and its MLX mirror share beyond
the array code: the bounds of the gates and the query path.

Axes: B batch, T tokens, H heads, G gate channels (3, plus c Omega taps).
"""

from __future__ import annotations

from typing import Any


class MemoryLayerRules:
    """A mixin for both backends' ``NeuralMemory`` (which provide ``config``, ``conv`` and
    ``_features``)."""

    config: Any

    def bounded_gates(self, raw: Any) -> tuple[Any, Any, Any, Any]:
        """``raw [B, T, H, G]`` in (0, 1) -> theta in (0, lr_max), eta in (0, momentum_max),
        alpha in (decay_min, 1), each ``[B, T, H]``, and gamma ``[B, T, H, c]`` in (0, 1)
        (None without an Omega window): the bounded gates of docs/architectures.md."""
        config = self.config
        lr, momentum = raw[..., 0] * config.lr_max, raw[..., 1] * config.momentum_max
        decay = config.decay_min + (1 - config.decay_min) * raw[..., 2]
        omega = raw[..., 3:] if config.omega_window > 1 else None
        return lr, momentum, decay, omega

    def _query_features(self, q: Any, cache: Any) -> tuple[Any, Any]:
        """The queries' causal conv (with its streaming cache), then the feature map."""
        q, cache = self.conv["q"](q, cache)
        return self._features(q), cache
