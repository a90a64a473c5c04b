"""Model configuration: one dataclass for every architecture, named size presets.

``create_model(name, preset=None, **overrides)`` / ``model_config(...)`` (models/backbone.py)
accept any ModelConfig field, any MemoryConfig field (routed to ``memory``), or ``memory=`` as
a MemoryConfig or a dict; ``ModelConfig.with_overrides`` does the routing. A config holds the
architecture only: run-time choices are set with ``LanguageModel.set_runtime``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ..layers.neural_memory import MemoryConfig
from ..validation import check_bool, check_choice, check_int, check_number

# Every embedding row costs dim floats; a vocabulary beyond this is a mistake, not a model.
MAX_VOCAB_SIZE = 2**24
# The attention cache is a ring of ``window`` slots per layer, allocated at the first call
# whatever the input's length: a window of 10^9 asked for 128 GB before anything ran.
MAX_WINDOW = 2**20
# Widths and depths far past any model (a dim of 2^40 overflowed the storage size computation)
MAX_DIM, MAX_DEPTH = 2**16, 2**10
MAC_MEMORY_INPUTS = ("attention", "input")
MAG_GATES = ("memory", "attention")
MAC_GATES = MAG_GATES  # MAC's eq. 25 uses MAG's gate: the same two orientations
# Fields added after checkpoint format 4, with the values every earlier file was built with.
MAC_FIELDS = {"mac_memory_input": "attention", "mac_context_norm": False}
# ... after format 5.
MAG_FIELDS = {"mag_gate": "memory"}
# ... after format 8.
MAC_GATE_FIELDS = {"mac_gate": "memory"}
# Fields that left the config, and where they went (named in the error for old code).
MOVED_FIELDS = {
    "muon": 'update_rule ("momentum", "muon" or "muon_chunk")',
    "impl": "model.set_runtime(memory_impl=...) (a run-time choice, not saved)",
    "checkpoint": "model.set_runtime(memory_checkpoint=...) (a run-time choice, not saved)",
}

# Shapes for the papers' model sizes. One shape serves every architecture, so the count varies
# with the layout (32k tied embedding included): at "170m" SWA has ~138M, LMM-layout models
# ~155M, MAG/MAL/MAC ~190M; the attention-plus-memory layouts sit ~30% above the name.
SIZE_PRESETS: dict[str, dict[str, Any]] = {
    "debug": {"dim": 64, "depth": 2, "num_heads": 4, "window": 32, "vocab_size": 256},
    "170m": {"dim": 768, "depth": 16, "num_heads": 12, "window": 512, "vocab_size": 32000},
    "340m": {"dim": 1024, "depth": 18, "num_heads": 16, "window": 512, "vocab_size": 32000},
    "760m": {"dim": 1536, "depth": 18, "num_heads": 16, "window": 1024, "vocab_size": 32000},
}


@dataclass
class ModelConfig:
    """Every architecture's settings. ``window`` is the sliding-window width of SWA-based
    models and the segment length of MAC; ``memory.chunk_size`` is the memory chunk."""

    name: str = "lmm"
    vocab_size: int = 256
    dim: int = 256
    depth: int = 4
    num_heads: int = 4
    window: int = 128
    num_persistent: int = 4
    ffn_expansion: float = 8 / 3  # SwiGLU hidden width = ffn_expansion * dim (rounded up to 8)
    tie_embeddings: bool = True
    rope_base: float = 10000.0
    norm_eps: float = 1e-6
    # MAC only (docs/architectures.md, "MAC options"). What the memory writes and reads after
    # attention: "attention" -- the attention output y (Titans eq. 24-25) -- or "input" --
    # the block's input x, as MAG does. context_norm: RMS-normalise the retrieved tokens h
    # before attention, so they enter it at the scale of the segment's normed tokens.
    mac_memory_input: str = "attention"
    mac_context_norm: bool = False
    # MAC only: which branch gates the other in eq. 25, as MAG's ``mag_gate``. "memory" -- y
    # (x) sigmoid(M*(y)), the papers' form -- or "attention" -- the memory's per-token read
    # passes, gated by y. With "memory" the read can only rescale y's channels, so an answer
    # drawn from 4,096 values (MQAR) cannot pass through it (docs/results.md, section 3).
    mac_gate: str = "memory"
    # MAG only (docs/architectures.md, "MAG option"): which branch gates the other. "memory"
    # -- RMSNorm(y) * sigmoid(RMSNorm(m)), the papers' eq. 28 -- or "attention" --
    # RMSNorm(m) * sigmoid(RMSNorm(y)), the gate's gain starting at zero.
    mag_gate: str = "memory"
    memory: MemoryConfig = field(default_factory=MemoryConfig)

    def __post_init__(self) -> None:
        if isinstance(self.memory, dict):
            self.memory = MemoryConfig(**_known(MemoryConfig, self.memory, "memory"))
        if not isinstance(self.memory, MemoryConfig):
            raise ValueError(f"memory must be a MemoryConfig or a dict, got {self.memory!r}")
        if not isinstance(self.name, str):
            raise ValueError(f"name must be a model name (str), got {self.name!r}")
        check_int("vocab_size", self.vocab_size, 1, MAX_VOCAB_SIZE)
        for name, maximum in (("dim", MAX_DIM), ("depth", MAX_DEPTH), ("num_heads", MAX_DIM)):
            check_int(name, getattr(self, name), 1, maximum)
        check_int("window", self.window, 1, MAX_WINDOW)
        check_int("num_persistent", self.num_persistent, 0, MAX_WINDOW)
        check_number("ffn_expansion", self.ffn_expansion, 0.0, 64.0, open_high=False)
        check_number("rope_base", self.rope_base, 1.0)
        check_number("norm_eps", self.norm_eps, 0.0, 1.0)
        check_bool("tie_embeddings", self.tie_embeddings)
        check_choice("mac_memory_input", self.mac_memory_input, MAC_MEMORY_INPUTS)
        check_bool("mac_context_norm", self.mac_context_norm)
        check_choice("mac_gate", self.mac_gate, MAC_GATES)
        check_choice("mag_gate", self.mag_gate, MAG_GATES)
        if self.dim % self.num_heads:
            raise ValueError(f"dim={self.dim} must be divisible by num_heads={self.num_heads}")
        if int(self.ffn_expansion * self.dim) < 1:
            raise ValueError(
                f"ffn_expansion={self.ffn_expansion} gives a feed-forward of width "
                f"{int(self.ffn_expansion * self.dim)} at dim={self.dim}; it must be >= 1"
            )

    @property
    def ffn_hidden(self) -> int:
        return 8 * -(-int(self.ffn_expansion * self.dim) // 8)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        return cls(**_known(cls, data, "ModelConfig"))

    def with_overrides(self, **overrides: Any) -> ModelConfig:
        """A copy with ModelConfig or MemoryConfig fields replaced (memory ones by name)."""
        model_fields = {f.name for f in fields(ModelConfig)}
        memory_fields = {f.name for f in fields(MemoryConfig)}
        top, nested = {}, {}
        for key, value in overrides.items():
            if key == "memory" and isinstance(value, dict):
                nested.update(value)
            elif key in model_fields:
                top[key] = value
            elif key in memory_fields:
                nested[key] = value
            elif key in MOVED_FIELDS:
                raise ValueError(f"config field {key!r} is gone: use {MOVED_FIELDS[key]}")
            else:
                raise ValueError(f"unknown config field {key!r} (not in ModelConfig/MemoryConfig)")
        config = replace(self, **top)
        if nested:
            nested = _known(MemoryConfig, nested, "memory")
            config = replace(config, memory=replace(config.memory, **nested))
        return config


def _known(cls: type, data: dict[str, Any], what: str) -> dict[str, Any]:
    """``data`` if every key is a field of dataclass ``cls``; else ValueError naming them."""
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a dict of fields, got {type(data).__name__}")
    unknown = sorted(set(data) - {f.name for f in fields(cls)})
    moved = [f"{key!r} is gone: use {MOVED_FIELDS[key]}" for key in unknown if key in MOVED_FIELDS]
    if moved:
        raise ValueError(f"{what} field " + "; ".join(moved))
    if unknown:
        raise ValueError(f"unknown {what} fields {unknown}")
    return data
