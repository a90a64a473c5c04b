"""Model configuration: one dataclass for every architecture, named size presets.

``ModelConfig.build(name, preset=None, **overrides)`` accepts any ModelConfig field, any
MemoryConfig field (routed to ``memory``), or ``memory=`` as a MemoryConfig or a dict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ..layers.neural_memory import MemoryConfig

# Shapes of the papers' model sizes (Titans Table 1 / ATLAS Section 6 scale); the parameter
# count includes a 32k-token tied embedding.
SIZE_PRESETS: dict[str, dict[str, Any]] = {
    "debug": {"dim": 64, "depth": 2, "num_heads": 4, "window": 32, "vocab_size": 256},
    "170m": {"dim": 768, "depth": 12, "num_heads": 12, "window": 512, "vocab_size": 32000},
    "340m": {"dim": 1024, "depth": 24, "num_heads": 16, "window": 512, "vocab_size": 32000},
    "760m": {"dim": 1536, "depth": 24, "num_heads": 16, "window": 1024, "vocab_size": 32000},
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
    memory: MemoryConfig = field(default_factory=MemoryConfig)

    def __post_init__(self) -> None:
        if isinstance(self.memory, dict):
            self.memory = MemoryConfig(**self.memory)
        for name in ("vocab_size", "dim", "depth", "num_heads", "window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_persistent < 0:
            raise ValueError(f"num_persistent must be >= 0, got {self.num_persistent}")
        if self.dim % self.num_heads:
            raise ValueError(f"dim={self.dim} must be divisible by num_heads={self.num_heads}")

    @property
    def ffn_hidden(self) -> int:
        return 8 * -(-int(self.ffn_expansion * self.dim) // 8)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ModelConfig fields {unknown}")
        return cls(**data)

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
            else:
                raise ValueError(f"unknown config field {key!r} (not in ModelConfig/MemoryConfig)")
        config = replace(self, **top)
        if nested:
            config = replace(config, memory=replace(config.memory, **nested))
        return config
