"""Softmax attention with persistent memory tokens, sliding windows, MAC segments and a
streaming KV cache.

Axes: B batch, T tokens, D model width, H heads, Dh head width, P persistent tokens,
L cache slots. Which keys a query may see is a rule on absolute positions: key position
<= query position, and within ``window`` tokens (SWA) or in the same ``segment`` (MAC).
Persistent tokens have no position and are always visible.

The cache of a windowed or segmented rule is a ring of fixed size (gpt-fast's static cache):
slot j holds the latest token whose position is j mod L, L = window - 1 or segment - 1 (all a
future query may still see), and empty slots carry a position no rule lets through. Its shapes
never change, so a compiled decode step is one graph at every position. Full attention keeps
every token (its cache grows with the context).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ..common.attention import (  # noqa: F401  (VisibilityRule: re-exported)
    QUERY_BLOCK,
    AttentionLayout,
    VisibilityRule,
)
from .basic import apply_rotary, rotary_tables

EMPTY_POSITION = -(2**62)  # an empty cache slot: out of every window and segment


@dataclass
class KVCache:
    """Keys and values a future query may see, per source (the tokens, and MAC's retrieved
    memory tokens): source s owns slots ``[s L, (s + 1) L)``."""

    keys: torch.Tensor  # [B, H, S*L, Dh], rotary already applied
    values: torch.Tensor  # [B, H, S*L, Dh]
    positions: torch.Tensor  # [S*L] absolute positions (int64), EMPTY_POSITION when unused


class Attention(AttentionLayout, nn.Module):
    """Multi-head causal attention ``[B, T, D] -> [B, T, D]`` with rotary positions.

    ``context`` (MAC's retrieved memory tokens, ``[B, T, D]``) adds keys/values that sit at the
    same positions as the input tokens; queries come from the input only. Construction:
    ``common/attention.py``'s ``AttentionLayout`` (shared with the MLX mirror).
    """

    linear = nn.Linear

    def _init_parameters(self, dim: int, num_persistent: int) -> None:
        # Persistent memory tokens live in model space and go through the key/value projections.
        self.persistent = nn.Parameter(torch.empty(num_persistent, dim)) if num_persistent else None
        self.init_weights()

    @torch.no_grad()
    def init_weights(self, std: float = 0.02, out_std: float | None = None) -> None:
        """N(0, std) for the q/k/v projection and the persistent tokens, N(0, out_std)
        (default std) for the output projection."""
        nn.init.normal_(self.to_qkv.weight, std=std)
        nn.init.normal_(self.to_out.weight, std=std if out_std is None else out_std)
        if self.persistent is not None:
            nn.init.normal_(self.persistent, std=std)

    def _project(self, x: torch.Tensor, rotation: tuple[torch.Tensor, torch.Tensor]):
        """q, k, v ``[B, H, T, Dh]`` of ``x`` ``[B, T, D]``, q and k rotated."""
        q, k, v = rearrange(self.to_qkv(x), "b t (n h d) -> n b h t d", n=3, h=self.num_heads)
        return apply_rotary(q, *rotation), apply_rotary(k, *rotation), v

    def _project_keys(self, x: torch.Tensor, rotation: tuple[torch.Tensor, torch.Tensor]):
        """k (rotated), v ``[B, H, T, Dh]`` of ``x`` ``[B, T, D]``: no queries."""
        width = self.to_qkv.in_features
        kv = F.linear(x, self.to_qkv.weight[width:])
        k, v = rearrange(kv, "b t (n h d) -> n b h t d", n=2, h=self.num_heads)
        return apply_rotary(k, *rotation), v

    def forward(
        self,
        x: torch.Tensor,
        cache: KVCache | None,
        position: int,
        context: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, KVCache]:
        """``x`` ``[B, T, D]`` at absolute positions ``position ...``; returns ``[B, T, D]``
        and the cache after the last token (``cache`` itself is not modified)."""
        positions = torch.arange(position, position + x.shape[1], device=x.device)
        rotation = rotary_tables(
            positions, self.to_qkv.in_features // self.num_heads, self.rope_base
        )
        q, k, v = self._project(x, rotation)
        new_keys, new_values = [k], [v]
        if context is not None:  # MAC: the retrieved tokens come first, as source 0
            k_ctx, v_ctx = self._project_keys(context, rotation)
            new_keys, new_values = [k_ctx, k], [v_ctx, v]
        if cache is None:
            cache = self.empty_cache(q, len(new_keys))
        out = self._attend(q, position, cache, new_keys, new_values)
        cache = self._write(cache, new_keys, new_values, position)
        return self.to_out(rearrange(out, "b h t d -> b t (h d)")), cache

    def empty_cache(self, q: torch.Tensor, sources: int) -> KVCache:
        """A cache holding no token, like ``q`` ``[B, H, T, Dh]`` (ring slots all empty)."""
        slots = sources * (self.rule.capacity or 0)
        keys = q.new_zeros(q.shape[0], q.shape[1], slots, q.shape[3])
        positions = torch.full((slots,), EMPTY_POSITION, dtype=torch.long, device=q.device)
        return KVCache(keys, keys.clone(), positions)

    def _write(self, cache: KVCache, keys: list, values: list, position: int) -> KVCache:
        """The cache after tokens ``position ... position + T - 1`` (one ``[B, H, T, Dh]``
        per source): appended (full attention) or written into the ring."""
        length = keys[0].shape[2]
        positions = torch.arange(position, position + length, device=cache.positions.device)
        capacity = self.rule.capacity
        if capacity is None:
            return KVCache(
                torch.cat([cache.keys, *keys], dim=2),
                torch.cat([cache.values, *values], dim=2),
                torch.cat([cache.positions, *[positions] * len(keys)]),
            )
        # Position p lives in ring slot p mod L; of this call's tokens only the last
        # min(T, L) survive, and their slots are distinct, so one out-of-place index_copy per
        # tensor writes them (a decode step copies the ring once, instead of a select per slot).
        kept = slice(length - min(length, capacity), length)  # the call's surviving tokens
        slots = torch.remainder(positions[kept], capacity) if capacity else positions[:0]
        index = torch.cat([slots + s * capacity for s in range(len(keys))])
        return KVCache(
            cache.keys.to(keys[0].dtype).index_copy(
                2, index, torch.cat([k[:, :, kept] for k in keys], dim=2)
            ),
            cache.values.to(values[0].dtype).index_copy(
                2, index, torch.cat([v[:, :, kept] for v in values], dim=2)
            ),
            cache.positions.index_copy(0, index, positions[kept].repeat(len(keys))),
        )

    def _persistent_kv(self, q: torch.Tensor):
        """Persistent tokens through the key/value projections: ``[B, H, P, Dh]`` each."""
        if self.persistent is None:
            empty = q.new_zeros(q.shape[0], q.shape[1], 0, q.shape[3])
            return empty, empty
        _, k, v = rearrange(
            self.to_qkv(self.persistent.to(q.dtype)), "p (n h d) -> n h p d", n=3, h=self.num_heads
        )
        return k.expand(q.shape[0], *k.shape), v.expand(q.shape[0], *v.shape)

    def _attend(self, q, position: int, cache: KVCache, keys: list, values: list):
        """SDPA over query blocks ``q`` ``[B, H, T, Dh]``; a block sees the persistent tokens,
        the cache, and the new keys its rule can allow (a slice: no data-dependent shape)."""
        p_keys, p_values = self._persistent_kv(q)
        length = q.shape[2]
        positions = torch.arange(position, position + length, device=q.device)
        # A call of several tokens that starts a MAC segment sees nothing cached: leave the
        # cache out (half the keys of a segment-long call, and no gradient into it). A single
        # token keeps it, so a compiled decode step has one graph at every position.
        if length > 1 and self.rule.first_visible(position) >= position:
            nothing = cache.keys.new_zeros(*cache.keys.shape[:2], 0, cache.keys.shape[3])
            cache = KVCache(nothing, nothing, cache.positions[:0])  # no slice: no graph edge
        cached_keys, cached_values = cache.keys.to(q.dtype), cache.values.to(q.dtype)
        outputs = []
        for start in range(0, length, QUERY_BLOCK):
            stop = min(length, start + QUERY_BLOCK)
            # the first block's earliest visible key is never a new one past its first query
            low = 0 if start == 0 else max(0, self.rule.first_visible(position + start) - position)
            key_pos = torch.cat([cache.positions, *[positions[low:stop]] * len(keys)])
            mask = self.rule.allowed(positions[start:stop], key_pos)
            mask = torch.cat([mask.new_ones(mask.shape[0], p_keys.shape[2]), mask], dim=1)
            block_keys = [p_keys, cached_keys, *[k[:, :, low:stop] for k in keys]]
            block_values = [p_values, cached_values, *[v[:, :, low:stop] for v in values]]
            outputs.append(
                F.scaled_dot_product_attention(
                    q[:, :, start:stop],
                    torch.cat(block_keys, dim=2),
                    torch.cat(block_values, dim=2),
                    attn_mask=mask,
                )
            )
        return torch.cat(outputs, dim=2)
