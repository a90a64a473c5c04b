"""Softmax attention with persistent memory tokens, sliding windows, MAC segments and a
streaming KV cache, in MLX (mirrors ``titans_atlas.layers.attention``).

Axes: B batch, T tokens, D model width, H heads, Dh head width, P persistent tokens,
L cached tokens. Visibility is a rule on absolute positions (``VisibilityRule``, shared with
the torch side); positions live on the host as numpy arrays, so masks and cache pruning cost
no device round trip.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ...common.attention import QUERY_BLOCK, AttentionLayout
from .basic import normal_init, rotary


@dataclass
class KVCache:
    keys: mx.array  # [B, H, L, Dh], rotary already applied
    values: mx.array  # [B, H, L, Dh]
    positions: np.ndarray  # [L] absolute positions (int64, host)


def _split_heads(x: mx.array, parts: int, heads: int) -> list[mx.array]:
    """``[B, T, (n H Dh)]`` -> n arrays ``[B, H, T, Dh]``."""
    batch, length, width = x.shape
    x = x.reshape(batch, length, parts, heads, width // (parts * heads))
    return [x[:, :, i].transpose(0, 2, 1, 3) for i in range(parts)]


class Attention(AttentionLayout, nn.Module):
    """Multi-head causal attention ``[B, T, D] -> [B, T, D]`` with rotary positions; MAC's
    ``context`` ``[B, T, D]`` adds keys/values at the input tokens' positions."""

    linear = nn.Linear

    def _init_parameters(self, dim: int, num_persistent: int) -> None:
        normal_init(self.to_qkv)
        normal_init(self.to_out)
        if num_persistent:
            self.persistent = 0.02 * mx.random.normal((num_persistent, dim))

    def _project(self, x: mx.array, positions: mx.array):
        q, k, v = _split_heads(self.to_qkv(x), 3, self.num_heads)
        return rotary(q, positions, self.rope_base), rotary(k, positions, self.rope_base), v

    def __call__(
        self, x: mx.array, cache: KVCache | None, position: int, context: mx.array | None = None
    ) -> tuple[mx.array, KVCache]:
        length = x.shape[1]
        host_positions = np.arange(position, position + length, dtype=np.int64)
        positions = mx.array(host_positions)
        q, k, v = self._project(x, positions)
        sources = [(cache.keys, cache.values, cache.positions)] if cache is not None else []
        if context is not None:
            _, k_ctx, v_ctx = self._project(context, positions)
            sources.append((k_ctx, v_ctx, host_positions))
        sources.append((k, v, host_positions))
        keys = mx.concatenate([s[0] for s in sources], axis=2)
        values = mx.concatenate([s[1] for s in sources], axis=2)
        key_pos = np.concatenate([s[2] for s in sources])
        out = self._attend(q, host_positions, keys, values, key_pos)
        keep = np.nonzero(key_pos >= self.rule.first_visible(position + length))[0]
        if len(keep) < len(key_pos):
            index = mx.array(keep.astype(np.int32))
            keys, values, key_pos = keys[:, :, index], values[:, :, index], key_pos[keep]
        out = out.transpose(0, 2, 1, 3).reshape(x.shape[0], length, -1)  # [B, T, H*Dh]
        return self.to_out(out), KVCache(keys, values, key_pos)

    def _persistent_kv(self, q: mx.array) -> tuple[mx.array, mx.array]:
        """Persistent tokens through the key/value projections: ``[B, H, P, Dh]`` each."""
        batch, heads, _, head_dim = q.shape
        if "persistent" not in self:
            empty = mx.zeros((batch, heads, 0, head_dim), dtype=q.dtype)
            return empty, empty
        _, k, v = _split_heads(self.to_qkv(self.persistent.astype(q.dtype))[None], 3, heads)
        return (mx.broadcast_to(t, (batch, *t.shape[1:])) for t in (k, v))

    def _attend(self, q, q_pos: np.ndarray, keys, values, key_pos: np.ndarray) -> mx.array:
        """Scaled dot-product attention over query blocks; each block sees only the keys its
        rule can allow."""
        p_keys, p_values = self._persistent_kv(q)
        scale = q.shape[-1] ** -0.5
        outputs = []
        for start in range(0, q.shape[2], QUERY_BLOCK):
            block_pos = q_pos[start : start + QUERY_BLOCK]
            near = (key_pos >= self.rule.first_visible(int(block_pos[0]))) & (
                key_pos <= block_pos[-1]
            )
            index = mx.array(np.nonzero(near)[0].astype(np.int32))
            mask = self.rule.allowed(block_pos, key_pos[near])
            mask = np.concatenate([np.ones((len(block_pos), p_keys.shape[2]), bool), mask], 1)
            outputs.append(
                mx.fast.scaled_dot_product_attention(
                    q[:, :, start : start + QUERY_BLOCK],
                    mx.concatenate([p_keys, keys[:, :, index]], axis=2),
                    mx.concatenate([p_values, values[:, :, index]], axis=2),
                    scale=scale,
                    mask=mx.array(mask),
                )
            )
        return mx.concatenate(outputs, axis=2)
