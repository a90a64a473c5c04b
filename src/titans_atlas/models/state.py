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

from ..layers.attention import KVCache
from ..layers.neural_memory import MemoryLayerState
from ..ops.checks import value_checks_enabled
from ..ops.state import map_tensors
from ..validation import compiling
from .cache_checks import (
    Fingerprint,
    cache_layout,
    cache_name,
    check_cache_layout,
    check_cache_values,
)
from .config import ModelConfig

# The largest stream position a state may stand at: far past any real stream (2**53 tokens),
# and small enough that positions stay exact in float64 and that the cache's masks
# (position - EMPTY_POSITION) never overflow int64.
MAX_POSITION = 2**53
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
    state: Any,
    fingerprint: Fingerprint,
    block_states: tuple[type, ...],
    batch_size: int,
    *,
    values: bool | None = None,
) -> None:
    """Raise ValueError unless ``state`` is a ModelState a model with ``fingerprint`` made,
    holding one state of each block's type, at a position >= 0, for ``batch_size`` samples.
    Always (cheap: Python attributes and tensor shapes/dtypes, no tensor values): the types
    of the state's fields and the layout of each attention cache. The caches' values (keys
    and values finite, positions the ones ``state.position`` implies) when ``values`` is
    True (one host sync; the model passes its ``validate`` setting within the
    ``ops.validating`` default, False while torch.compile traces); None: as
    ``ops.validating`` says."""
    if not isinstance(state, ModelState):
        raise ValueError(f"state must be a ModelState returned by the model, got {type(state)}")
    if state.fingerprint != fingerprint:
        check_fingerprint(state.fingerprint)  # None or a string was a TypeError from dict()
        theirs, ours = dict(state.fingerprint), dict(fingerprint)
        differ = [
            f"{k}={theirs.get(k)!r} (model: {ours[k]!r})" for k in ours if theirs.get(k) != ours[k]
        ]
        raise ValueError(f"state was made by another model: {', '.join(differ)}")
    check_position("state.position", state.position)
    if isinstance(state.batch_size, bool) or not isinstance(state.batch_size, int):
        got = described(state.batch_size)
        raise ValueError(f"state.batch_size must be an integer >= 1, got {got}")
    if state.batch_size != batch_size:
        raise ValueError(f"state is for batch {state.batch_size}, input_ids has {batch_size}")
    if not isinstance(state.blocks, list) or len(state.blocks) != len(block_states):
        raise ValueError(f"state.blocks must be a list of {len(block_states)} block states")
    caches, traced = [], compiling()  # a compiled step guards on the caches' shapes
    for i, (block, kind) in enumerate(zip(state.blocks, block_states)):
        if not isinstance(block, kind):
            raise ValueError(f"state.blocks[{i}] must be a {kind.__name__}, got {type(block)}")
        if any(getattr(block, part, 0) is None for part in ("attn", "memory")):
            raise ValueError(f"state.blocks[{i}] is incomplete: a returned state has every part")
        layer = block if isinstance(block, MemoryLayerState) else getattr(block, "memory", None)
        if isinstance(layer, MemoryLayerState) and layer.memory.position != state.position:
            where = f"state.blocks[{i}]" + ("" if layer is block else ".memory") + ".memory"
            check_position(f"{where}.position", layer.memory.position)
            raise ValueError(
                f"state.position={state.position} but block {i}'s memory stands at "
                f"{layer.memory.position}: the state was edited"
            )
        cache = block if isinstance(block, KVCache) else getattr(block, "attn", None)
        if cache is not None and not traced:
            if not isinstance(cache, KVCache):
                where = cache_name(i, cache is block)
                raise ValueError(f"{where} must be a KVCache, got {type(cache).__name__}")
            # a block state with more than one source in its cache says so (MAC: 2)
            caches.append((i, cache is block, cache, getattr(type(block), "cache_sources", 1)))
    if not caches:
        return
    capacity, heads, head_dim = cache_layout(fingerprint)
    for i, whole, cache, sources in caches:
        length = sources * (state.position if capacity is None else capacity)
        check_cache_layout(cache, (i, whole), (state.batch_size, heads, length, head_dim))
    if values or (values is None and value_checks_enabled()):
        named = [(cache_name(i, whole), cache, sources) for i, whole, cache, sources in caches]
        check_cache_values(named, state.position, capacity)


def described(value: Any) -> str:
    """A value read from a state, with its type (a string "16" is not the integer 16)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits ({type(value).__name__})"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def check_position(name: str, position: Any) -> None:
    """An integer stream position in [0, MAX_POSITION]."""
    if isinstance(position, bool) or not isinstance(position, int):
        raise ValueError(f"{name} must be an integer >= 0, got {described(position)}")
    if position < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {position}")
    if position > MAX_POSITION:
        raise ValueError(  # bit_length: str() of a 5000-digit int is itself an error
            f"{name} is about 2**{position.bit_length() - 1}, past the largest stream "
            f"position 2**53: the state was edited"
        )


def check_fingerprint(fingerprint: Any) -> None:
    """A fingerprint as ``state_fingerprint`` makes it: a tuple of (field, value) pairs with
    a string field and a plain value."""
    scalar = (type(None), bool, int, float, str)
    if not isinstance(fingerprint, tuple) or not all(
        isinstance(pair, tuple)
        and len(pair) == 2
        and isinstance(pair[0], str)
        and isinstance(pair[1], scalar)
        for pair in fingerprint
    ):
        raise ValueError(
            "state.fingerprint must be a tuple of (field, value) pairs naming the model that "
            f"made the state, got {described(fingerprint)}"
        )
