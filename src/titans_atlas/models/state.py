"""``ModelState``: a stream through a model, and the checks a state passes when it comes back.

A state is explicit data: the next position, each block's typed state (``KVCache``,
``MemoryLayerState``, ``HybridState``, ``MACState``) and a fingerprint of the model that made
it -- the architecture and every config field that shapes the state. A state is accepted only
by a model with the same fingerprint (the weights may differ: a fine-tuned copy continues a
stream), so a state from a model of another width, window or chunk size is refused by name
instead of failing deep inside a concatenation or, worse, running silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..layers.neural_memory import MemoryLayerState
from ..ops.state import map_tensors
from .config import ModelConfig

Fingerprint = tuple[tuple[str, Any], ...]
# The fields that decide the shapes and meaning of a stream's state (vocab_size,
# num_persistent, norms and gate initialisations do not).
STATE_FIELDS = ("name", "dim", "depth", "num_heads", "window")
MEMORY_STATE_FIELDS = (
    "model",
    "expansion",
    "depth",
    "residual",
    "chunk_size",
    "omega_window",
    "update_rule",
    "feature_map",
    "poly_degree",
    "feature_projection",
    "conv_kernel",
)


def state_fingerprint(config: ModelConfig) -> Fingerprint:
    """(field, value) pairs of ``config`` that a state depends on; memory fields prefixed."""
    own = [(name, getattr(config, name)) for name in STATE_FIELDS]
    memory = [(f"memory.{n}", getattr(config.memory, n)) for n in MEMORY_STATE_FIELDS]
    # Only when it differs from the layer it was added beside, so states made before the
    # field existed keep their fingerprint.
    if config.memory.omega_window > 1 and config.memory.omega_gate_source != "step":
        memory.append(("memory.omega_gate_source", config.memory.omega_gate_source))
    return tuple(own + memory)


@dataclass
class ModelState:
    """A stream through a model: the next position, each block's own state, and the
    fingerprint of the model that made it."""

    position: int
    blocks: list[Any]
    batch_size: int
    fingerprint: Fingerprint = ()

    @property
    def model(self) -> str:
        """The architecture that made this state."""
        return dict(self.fingerprint).get("name", "")

    def detach(self) -> ModelState:
        """Cut the autograd graph (truncated backpropagation through time)."""
        return map_tensors(self, torch.Tensor.detach)

    def to(self, target: torch.device | str | torch.dtype) -> ModelState:
        """Move every tensor to a device, or cast the floating ones to a dtype (cache
        positions stay integers)."""
        if isinstance(target, torch.dtype):
            if not target.is_floating_point:
                raise ValueError(f"a state casts to a floating dtype, got {target}")
            return map_tensors(self, lambda t: t.to(target) if t.is_floating_point() else t)
        return map_tensors(self, lambda t: t.to(target))

    def nbytes(self) -> int:
        """Bytes of the tensors the state holds, each shared tensor counted once."""
        seen: dict[int, int] = {}
        map_tensors(self, lambda t: seen.setdefault(t.data_ptr(), t.numel() * t.element_size()))
        return sum(seen.values())


def check_state(
    state: Any, fingerprint: Fingerprint, block_states: tuple[type, ...], batch_size: int
) -> None:
    """Raise ValueError unless ``state`` is a ModelState a model with ``fingerprint`` made,
    holding one state of each block's type, at a position >= 0, for ``batch_size`` samples.
    Cheap: Python attributes only, no tensor values."""
    if not isinstance(state, ModelState):
        raise ValueError(f"state must be a ModelState returned by the model, got {type(state)}")
    if state.fingerprint != fingerprint:
        theirs, ours = dict(state.fingerprint), dict(fingerprint)
        differ = [
            f"{k}={theirs.get(k)!r} (model: {ours[k]!r})" for k in ours if theirs.get(k) != ours[k]
        ]
        raise ValueError(f"state was made by another model: {', '.join(differ)}")
    if (
        isinstance(state.position, bool)
        or not isinstance(state.position, int)
        or state.position < 0
    ):
        raise ValueError(f"state.position must be an integer >= 0, got {state.position!r}")
    if state.batch_size != batch_size:
        raise ValueError(f"state is for batch {state.batch_size}, input_ids has {batch_size}")
    if not isinstance(state.blocks, list) or len(state.blocks) != len(block_states):
        raise ValueError(f"state.blocks must be a list of {len(block_states)} block states")
    for i, (block, kind) in enumerate(zip(state.blocks, block_states)):
        if not isinstance(block, kind):
            raise ValueError(f"state.blocks[{i}] must be a {kind.__name__}, got {type(block)}")
        if any(getattr(block, part, 0) is None for part in ("attn", "memory")):
            raise ValueError(f"state.blocks[{i}] is incomplete: a returned state has every part")
        layer = block if isinstance(block, MemoryLayerState) else getattr(block, "memory", None)
        if isinstance(layer, MemoryLayerState) and layer.memory.position != state.position:
            raise ValueError(
                f"state.position={state.position} but block {i}'s memory stands at "
                f"{layer.memory.position}: the state was edited"
            )
