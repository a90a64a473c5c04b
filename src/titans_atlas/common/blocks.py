"""The data flow of each architecture's block, written once for both backends: a block is
its submodules (``norm``, ``attn``, ``memory``, ``gate``, ``ffn``) and this flow between
them; the torch blocks (``models/``) and their MLX mirrors (``mlx/models/``) build the
submodules and mix the flow in (torch calls ``forward``; an MLX block sets
``__call__ = <Flow>.forward``). Shapes: x ``[B, T, D]``; ``state_class`` is the backend's
block state (``HybridState``, ``MACState``, ``KVCache``).
"""

from __future__ import annotations

from typing import Any


def attention_args(config: Any, rule: Any, persistent: bool = True) -> tuple:
    """A block's attention from its ``ModelConfig``: (width, heads, visibility ``rule``,
    persistent tokens -- none where ``persistent`` is False --, rotary base)."""
    tokens = config.num_persistent if persistent else 0
    return config.dim, config.num_heads, rule, tokens, config.rope_base


class MAGFlow:
    """MAG (Titans eqs. 26-28): h = norm(x); y = attn(h); m = memory(h); x + gate(y, m); FFN."""

    state_class: type

    def forward(self, x: Any, state: Any, position: int) -> tuple[Any, Any]:
        state = state or self.state_class()
        h = self.norm(x)
        y, cache = self.attn(h, state.attn, position)
        m, memory_state = self.memory(h, state.memory)
        x = x + self.gate(y, m)
        return self.ffn(x), self.state_class(attn=cache, memory=memory_state)


class MALFlow:
    """MAL (Titans eqs. 29-31): y = memory(norm(x)); attention over x + y; FFN."""

    state_class: type

    def forward(self, x: Any, state: Any, position: int) -> tuple[Any, Any]:
        state = state or self.state_class()
        y, memory_state = self.memory(self.norm(x), state.memory)
        x, cache = self.attn(x + y, state.attn, position)
        return self.ffn(x), self.state_class(attn=cache, memory=memory_state)


class AttentionFlow:
    """The controls: residual attention (its KV cache is the state), then FFN."""

    def forward(self, x: Any, state: Any, position: int) -> tuple[Any, Any]:
        x, cache = self.attn(x, state, position)
        return self.ffn(x), cache


class MACSegmentFlow:
    """One MAC segment (Titans eqs. 21-25), or the part of it in this call: retrieve from the
    segment's read-only memory M_{s-1} (optionally RMSNorm'ed), attend over [persistent ;
    retrieved ; segment], write the attention output (or, ``mac_memory_input="input"``, the
    block's input) into the memory, gate."""

    state_class: type

    def _segment(self, x: Any, state: Any, position: int) -> tuple[Any, Any]:
        h_in = self.norm(x)
        retrieved, retrieve_conv = self.memory.retrieve(
            h_in, state.segment_weights, state.retrieve_conv
        )
        context_norm = getattr(self, "context_norm", None)  # config.mac_context_norm
        if context_norm is not None:
            retrieved = context_norm(retrieved)
        y, attn = self.attn(h_in, state.attn, position, context=retrieved)
        written = y if self.memory_input == "attention" else x  # config.mac_memory_input
        m, memory = self.memory(self.memory_norm(written), state.memory)
        new_state = self.state_class(
            memory=memory,
            segment_weights=state.segment_weights,
            attn=attn,
            retrieve_conv=retrieve_conv,
        )
        return x + self.gate(y, m), new_state
