"""Each architecture's block written once for both backends: a block is its submodules
(``norm``, ``attn``, ``memory``, ``gate``, ``ffn``), which its flow's ``build`` makes from one
backend's ``BlockParts`` and a ``ModelConfig``, and the flow between them (``forward``). The
torch blocks (``models/``) and their MLX mirrors (``mlx/models/``) mix a flow into the
backend's ``Built`` module (torch calls ``forward``; MLX's ``__call__`` runs it), so both sides
build the same submodules under the same names and a checkpoint written by one loads into the
other. Shapes: x ``[B, T, D]``; ``state_class`` is the backend's block state
(``HybridState``, ``MACState``, ``KVCache``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .attention import VisibilityRule


def attention_args(config: Any, rule: Any, persistent: bool = True) -> tuple:
    """A block's attention from its ``ModelConfig``: (width, heads, visibility ``rule``,
    persistent tokens -- none where ``persistent`` is False --, rotary base)."""
    tokens = config.num_persistent if persistent else 0
    return config.dim, config.num_heads, rule, tokens, config.rope_base


@dataclass(frozen=True)
class BlockParts:
    """One backend's building bricks by role (classes); the methods wire a ``ModelConfig``
    into the three that take widths rather than the config."""

    rms_norm: Any  # (dim, eps=) -> RMSNorm
    attention: Any  # (*attention_args(...)) -> Attention
    memory: Any  # (dim, num_heads, MemoryConfig) -> NeuralMemory
    swiglu: Any  # (dim, hidden_dim) -> SwiGLU
    feed_forward: Any  # (config) -> x + SwiGLU(RMSNorm(x))
    residual_attention: Any  # (config, rule) -> x + Attn(RMSNorm(x))
    gate: Any  # (config) -> the non-linear gate

    def norm(self, config: Any) -> Any:
        return self.rms_norm(config.dim, eps=config.norm_eps)

    def attn(self, config: Any, rule: VisibilityRule) -> Any:
        return self.attention(*attention_args(config, rule))

    def neural_memory(self, config: Any) -> Any:
        return self.memory(config.dim, config.num_heads, config.memory)


class FeedForwardFlow:
    """x + SwiGLU(RMSNorm(x))."""

    def build(self, parts: BlockParts, config: Any) -> None:
        self.norm = parts.norm(config)
        self.ffn = parts.swiglu(config.dim, config.ffn_hidden)

    def forward(self, x: Any) -> Any:
        return x + self.ffn(self.norm(x))


class ResidualAttentionFlow:
    """x + Attn(RMSNorm(x)) with a KV cache in the block state."""

    def build(self, parts: BlockParts, config: Any, rule: VisibilityRule) -> None:
        self.norm = parts.norm(config)
        self.attn = parts.attn(config, rule)

    def forward(self, x: Any, cache: Any, position: int) -> tuple[Any, Any]:
        y, cache = self.attn(self.norm(x), cache, position)
        return x + y, cache


class GateNorms:
    """The non-linear gate's two learnable normalisations (its sigmoid is array code).

    ``attention_gates`` (MAG's ``mag_gate="attention"``, MAC's ``mac_gate="attention"``)
    swaps the roles: the memory's read is what passes, RMSNorm(m) * sigmoid(RMSNorm(y)), and
    the gating norm's gain starts at zero (``ZERO_GAIN``), so the gate starts at a uniform 0.5
    instead of per-token noise."""

    def build(self, parts: BlockParts, config: Any, attention_gates: bool = False) -> None:
        self.norm_y = parts.norm(config)
        self.norm_m = parts.norm(config)
        self.attention_gates = attention_gates

    @property
    def zero_gain_norm(self) -> Any:
        """The norm whose gain starts at zero: the gating side's, with ``attention_gates``."""
        return self.norm_y if self.attention_gates else None


class MemoryFlow:
    """LMM (Titans Section 4): x + memory(norm(x)), then FFN; the state is the memory
    layer's."""

    def build(self, parts: BlockParts, config: Any) -> None:
        self.norm = parts.norm(config)
        self.memory = parts.neural_memory(config)
        self.ffn = parts.feed_forward(config)

    def forward(self, x: Any, state: Any, position: int) -> tuple[Any, Any]:
        y, memory_state = self.memory(self.norm(x), state)
        return self.ffn(x + y), memory_state


class MAGFlow:
    """MAG (Titans eqs. 26-28): h = norm(x); y = attn(h); m = memory(h); x + gate(y, m); FFN.
    ``config.mag_gate`` says which branch gates: "memory" (the papers' form, RMSNorm(y) *
    sigmoid(RMSNorm(m))) or "attention" (RMSNorm(m) * sigmoid(RMSNorm(y)))."""

    state_class: type

    def build(self, parts: BlockParts, config: Any) -> None:
        self.norm = parts.norm(config)
        self.attn = parts.attn(config, VisibilityRule(window=config.window))
        self.memory = parts.neural_memory(config)
        self.gate = parts.gate(config, config.mag_gate == "attention")
        self.ffn = parts.feed_forward(config)

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

    def build(self, parts: BlockParts, config: Any) -> None:
        self.norm = parts.norm(config)
        self.memory = parts.neural_memory(config)
        self.attn = parts.residual_attention(config, VisibilityRule(window=config.window))
        self.ffn = parts.feed_forward(config)

    def forward(self, x: Any, state: Any, position: int) -> tuple[Any, Any]:
        state = state or self.state_class()
        y, memory_state = self.memory(self.norm(x), state.memory)
        x, cache = self.attn(x + y, state.attn, position)
        return self.ffn(x), self.state_class(attn=cache, memory=memory_state)


class AttentionFlow:
    """The controls: residual attention (its KV cache is the state), then FFN; ``rule_of``
    gives the attention's visibility from the config (full attention here)."""

    rule_of = staticmethod(lambda config: VisibilityRule())

    def build(self, parts: BlockParts, config: Any) -> None:
        self.attn = parts.residual_attention(config, self.rule_of(config))
        self.ffn = parts.feed_forward(config)

    def forward(self, x: Any, state: Any, position: int) -> tuple[Any, Any]:
        x, cache = self.attn(x, state, position)
        return self.ffn(x), cache


class SlidingWindowFlow(AttentionFlow):
    """SWA, the windowed control: ``AttentionFlow`` with a window of ``config.window``
    tokens."""

    rule_of = staticmethod(lambda config: VisibilityRule(window=config.window))


class MACSegmentFlow:
    """One MAC segment (Titans eqs. 21-25), or the part of it in this call: retrieve from the
    segment's read-only memory M_{s-1} (optionally RMSNorm'ed), attend over [persistent ;
    retrieved ; segment], write the attention output (or, ``mac_memory_input="input"``, the
    block's input) into the memory, gate (``mac_gate``: y gated by the memory's read, the
    papers' eq. 25, or with "attention" the read gated by y)."""

    state_class: type

    def build(self, parts: BlockParts, config: Any) -> None:
        self.segment = config.window
        self.norm = parts.norm(config)
        self.memory_norm = parts.norm(config)
        self.memory = parts.neural_memory(config)
        self.memory_input = config.mac_memory_input
        self.context_norm = parts.norm(config) if config.mac_context_norm else None
        self.attn = parts.attn(config, VisibilityRule(segment=config.window))
        self.gate = parts.gate(config, config.mac_gate == "attention")
        self.ffn = parts.feed_forward(config)

    def _segment_lengths(self, length: int, position: int) -> list[int]:
        """How a call of ``length`` tokens at ``position`` falls into segments. The torch block
        takes them with one ``split`` rather than a slice per segment: each slice's backward
        writes a zero-filled gradient of the whole input, O(segments x length) in all."""
        lengths, pos, end = [], position, position + length
        while pos < end:
            lengths.append(min(end, pos + self.segment - pos % self.segment) - pos)
            pos += lengths[-1]
        return lengths

    def _segment(self, x: Any, state: Any, position: int) -> tuple[Any, Any]:
        h_in = self.norm(x)
        retrieved, retrieve_conv = self.memory.retrieve(
            h_in, state.segment_weights, state.retrieve_conv
        )
        if self.context_norm is not None:  # config.mac_context_norm
            retrieved = self.context_norm(retrieved)
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
