"""Softmax attention with persistent memory tokens, sliding windows, MAC segments and a
streaming KV cache.

Axes: B batch, T tokens, D model width, H heads, Dh head width, P persistent tokens,
L cached tokens. Which keys a query may see is a rule on absolute positions: key position
<= query position, and within ``window`` tokens (SWA) or in the same ``segment`` (MAC).
Persistent tokens have no position and are always visible. The cache keeps only keys some
future query may still see, so it stays bounded for windows and segments.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .basic import rotary

QUERY_BLOCK = 512  # queries per SDPA call: bounds the mask and score memory on long inputs


@dataclass
class KVCache:
    keys: torch.Tensor  # [B, H, L, Dh], rotary already applied
    values: torch.Tensor  # [B, H, L, Dh]
    positions: torch.Tensor  # [L] absolute positions (long)


@dataclass(frozen=True)
class VisibilityRule:
    """Which earlier tokens a query sees: all (None, None), a window, or its segment."""

    window: int | None = None
    segment: int | None = None

    def allowed(self, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        """Boolean ``[Tq, Tk]``: may the query at ``query_pos[i]`` attend ``key_pos[j]``?"""
        q, k = query_pos[:, None], key_pos[None, :]
        ok = k <= q
        if self.window is not None:
            ok = ok & (q - k < self.window)
        if self.segment is not None:
            ok = ok & (q // self.segment == k // self.segment)
        return ok

    def first_visible(self, position: int) -> int:
        """Earliest key position a query at ``position`` or later may still see."""
        first = 0
        if self.window is not None:
            first = max(first, position - self.window + 1)
        if self.segment is not None:
            first = max(first, position - position % self.segment)
        return first


class Attention(nn.Module):
    """Multi-head causal attention ``[B, T, D] -> [B, T, D]`` with rotary positions.

    ``context`` (MAC's retrieved memory tokens, ``[B, T, D]``) adds keys/values that sit at the
    same positions as the input tokens; queries come from the input only.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        rule: VisibilityRule,
        num_persistent: int = 0,
        rope_base: float = 10000.0,
    ) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim={dim} must be divisible by num_heads={num_heads}")
        self.num_heads, self.rule, self.rope_base = num_heads, rule, rope_base
        self.to_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.to_out = nn.Linear(dim, dim, bias=False)
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

    def _project(self, x: torch.Tensor, positions: torch.Tensor):
        q, k, v = rearrange(self.to_qkv(x), "b t (n h d) -> n b h t d", n=3, h=self.num_heads)
        return rotary(q, positions, self.rope_base), rotary(k, positions, self.rope_base), v

    def forward(
        self,
        x: torch.Tensor,
        cache: KVCache | None,
        position: int,
        context: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, KVCache]:
        length = x.shape[1]
        positions = torch.arange(position, position + length, device=x.device)
        q, k, v = self._project(x, positions)
        sources = [(cache.keys, cache.values, cache.positions)] if cache is not None else []
        if context is not None:
            _, k_ctx, v_ctx = self._project(context, positions)
            sources.append((k_ctx, v_ctx, positions))
        sources.append((k, v, positions))
        keys, values, key_pos = (list(group) for group in zip(*sources))
        keys, values, key_pos = torch.cat(keys, 2), torch.cat(values, 2), torch.cat(key_pos)
        out = self._attend(q, positions, keys, values, key_pos)
        keep = key_pos >= self.rule.first_visible(position + length)
        cache = KVCache(keys[:, :, keep], values[:, :, keep], key_pos[keep])
        return self.to_out(rearrange(out, "b h t d -> b t (h d)")), cache

    def _persistent_kv(self, q: torch.Tensor):
        """Persistent tokens through the key/value projections: ``[B, H, P, Dh]`` each."""
        if self.persistent is None:
            empty = q.new_zeros(q.shape[0], q.shape[1], 0, q.shape[3])
            return empty, empty
        _, k, v = rearrange(
            self.to_qkv(self.persistent.to(q.dtype)), "p (n h d) -> n h p d", n=3, h=self.num_heads
        )
        return k.expand(q.shape[0], *k.shape), v.expand(q.shape[0], *v.shape)

    def _attend(self, q, q_pos, keys, values, key_pos) -> torch.Tensor:
        """SDPA over query blocks; each block sees only the keys its rule can allow."""
        p_keys, p_values = self._persistent_kv(q)
        outputs = []
        for start in range(0, q.shape[2], QUERY_BLOCK):
            block_pos = q_pos[start : start + QUERY_BLOCK]
            near = (key_pos >= self.rule.first_visible(int(block_pos[0]))) & (
                key_pos <= block_pos[-1]
            )
            mask = self.rule.allowed(block_pos, key_pos[near])
            mask = torch.cat([mask.new_ones(mask.shape[0], p_keys.shape[2]), mask], dim=1)
            outputs.append(
                F.scaled_dot_product_attention(
                    q[:, :, start : start + QUERY_BLOCK],
                    torch.cat([p_keys, keys[:, :, near]], dim=2),
                    torch.cat([p_values, values[:, :, near]], dim=2),
                    attn_mask=mask,
                )
            )
        return torch.cat(outputs, dim=2)
