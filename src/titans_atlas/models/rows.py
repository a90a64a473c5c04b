"""Per-row state surgery for long-stream training: give some rows of a batched ``ModelState``
a fresh stream while the other rows keep theirs.

Axes: B batch rows. ``replace_rows(state, fresh, rows)`` is the exact, generic part: walking
two states of the same structure, row b of every tensor comes from ``fresh`` where
``rows[b]``. ``reset_rows(model, state, rows)`` builds the fresh values and calls it:

* a memory (``MemoryState``): weights and chunk base -> the layer's initial weights (the
  parameters themselves, so reset rows send gradient to them as a fresh stream does),
  momentum -> 0, Omega halo -> 0 (what a stream start holds);
* other per-row tensors (short-conv caches) -> 0, which is what a fresh stream pads with;
* attention KV caches are kept: their positions are shared by the rows, so one row cannot
  drop its keys. A reset row of a sliding-window model may still attend to up to ``window``
  tokens of the previous stream, as packed training attends across documents. MAC's cache
  is empty at a segment start, so windows aligned to segments reset it exactly.

A fresh stream starts at position 0; a reset row continues at the batch's position. For the
memory this is exact when the position is a multiple of the chunk size (and of MAC's
segment), which ``check_stream_alignment`` demands of ``seq_len``: memory-only models (lmm,
atlas, omeganet, atlas++) then give a reset row exactly a fresh stream's logits and
gradients. Models with attention see one more difference: rotary queries meet
position-free persistent keys, so their scores depend on the absolute position.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace
from typing import Any

import torch

from ..layers.attention import KVCache
from ..layers.neural_memory import NeuralMemory
from ..ops.state import MemoryState
from .backbone import LanguageModel
from .state import ModelState


def _mask(rows: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return rows.to(like.device).reshape(-1, *([1] * (like.ndim - 1)))


def replace_rows(state: Any, fresh: Any, rows: torch.Tensor) -> Any:
    """``state`` with row b of every tensor taken from ``fresh`` where ``rows[b]`` (bool
    ``[B]``); the two must have the same structure. Non-tensor leaves, and tensors without a
    leading batch axis, come from ``state``."""
    if fresh is state:  # shared substructure (a KV cache kept as it is)
        return state
    if isinstance(state, torch.Tensor):
        if not isinstance(fresh, torch.Tensor) or fresh.shape[1:] != state.shape[1:]:
            raise ValueError("fresh must have the structure and shapes of state")
        if state.ndim == 0 or state.shape[0] != rows.shape[0]:
            return state  # no batch axis (e.g. cache positions shared by the rows)
        return torch.where(_mask(rows, state), fresh.to(state.dtype), state)
    if is_dataclass(state) and not isinstance(state, type):
        if type(fresh) is not type(state):
            raise ValueError(
                f"fresh has a {type(fresh).__name__} where state has a {type(state).__name__}"
            )
        return replace(
            state,
            **{
                f.name: replace_rows(getattr(state, f.name), getattr(fresh, f.name), rows)
                for f in fields(state)
            },
        )
    if isinstance(state, dict):
        if not isinstance(fresh, dict) or set(fresh) != set(state):
            raise ValueError("fresh must have the structure of state (dict keys differ)")
        return {key: replace_rows(value, fresh[key], rows) for key, value in state.items()}
    if isinstance(state, list | tuple):
        if not isinstance(fresh, list | tuple) or len(fresh) != len(state):
            raise ValueError("fresh must have the structure of state (sequence lengths differ)")
        return type(state)(replace_rows(a, b, rows) for a, b in zip(state, fresh))
    return state


def fresh_memory(memory: MemoryState, layer: NeuralMemory) -> MemoryState:
    """The values a new stream's memory holds, in the structure of ``memory``."""
    batch = memory.batch_size
    initial = {n: w.unsqueeze(0).expand(batch, *w.shape) for n, w in layer.initial_weights.items()}
    return replace(
        memory,
        weights=initial,
        momentum={n: torch.zeros_like(w) for n, w in memory.momentum.items()},
        base=None if memory.base is None else initial,
        halo_keys=None if memory.halo_keys is None else torch.zeros_like(memory.halo_keys),
        halo_values=None if memory.halo_values is None else torch.zeros_like(memory.halo_values),
    )


def fresh_like(obj: Any, layers: list[NeuralMemory]) -> Any:
    """What a new stream holds, in the structure of a block's state ``obj`` (``layers``:
    the block's memory layers in order, consumed)."""
    if isinstance(obj, MemoryState):
        if not layers:
            raise ValueError("the state holds more memories than the block has memory layers")
        return fresh_memory(obj, layers.pop(0))
    if isinstance(obj, KVCache):
        return obj
    if isinstance(obj, torch.Tensor):
        return torch.zeros_like(obj)
    if is_dataclass(obj) and not isinstance(obj, type):
        return replace(
            obj, **{f.name: fresh_like(getattr(obj, f.name), layers) for f in fields(obj)}
        )
    if isinstance(obj, dict):
        return {key: fresh_like(value, layers) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(fresh_like(value, layers) for value in obj)
    return obj


def rows_to_reset(state: ModelState | None, rows: torch.Tensor | None) -> bool:
    """Whether some but not all rows of ``state`` are flagged in ``rows`` (bool ``[B]``; a
    ValueError for another shape): only then does a reset touch rows one by one. No state,
    no flags or every row flagged means a fresh stream (None); no row flagged, ``state``."""
    if state is None or rows is None:
        return False
    if rows.shape != (state.batch_size,):
        raise ValueError(
            f"rows must be a bool [{state.batch_size}] tensor, got {tuple(rows.shape)}"
        )
    return bool(rows.any()) and not bool(rows.all())


def reset_rows(
    model: LanguageModel, state: ModelState | None, rows: torch.Tensor | None
) -> ModelState | None:
    """``state`` with the rows flagged in ``rows`` (bool ``[B]``) starting a fresh stream
    (see the module docstring). ``None`` -- every row fresh -- when all rows are flagged."""
    if not rows_to_reset(state, rows):
        return None if state is None or rows is None or bool(rows.all()) else state
    blocks = []
    for block, block_state in zip(model.blocks, state.blocks):
        layers = [m for m in block.modules() if isinstance(m, NeuralMemory)]
        blocks.append(replace_rows(block_state, fresh_like(block_state, layers), rows))
    return replace(state, blocks=blocks)


def check_stream_alignment(model: LanguageModel, seq_len: int) -> None:
    """Stream mode resets rows at window starts; the reset equals a fresh stream only where
    the window start is a multiple of the memory chunk (and of MAC's segment)."""
    config = model.config
    if config.name == "transformer":
        raise ValueError(
            "stream mode carries the state from window to window, and the full-attention "
            "transformer's KV cache grows without bound: train it with data.mode='packed'"
        )
    grids = {}
    if any(isinstance(m, NeuralMemory) for m in model.modules()):
        grids["memory.chunk_size"] = config.memory.chunk_size
    if config.name == "mac":
        grids["window (MAC segment)"] = config.window
    for name, grid in grids.items():
        if seq_len % grid:
            raise ValueError(
                f"stream mode needs train.seq_len={seq_len} to be a multiple of {name}={grid}"
            )


def take_rows(state: ModelState, start: int, stop: int) -> ModelState:
    """Rows ``[start, stop)`` of a batched state: a rank's part of a global stream state.
    KV-cache positions (shared by the rows) are kept whole; tensors shared inside the state
    stay shared."""
    if not 0 <= start < stop <= state.batch_size:
        raise ValueError(f"rows [{start}, {stop}) are not inside a batch of {state.batch_size}")
    memo: dict[int, torch.Tensor] = {}

    def take(obj: Any, shared: bool = False) -> Any:
        if isinstance(obj, torch.Tensor):
            if id(obj) not in memo:
                rows = not shared and obj.ndim and obj.shape[0] == state.batch_size
                memo[id(obj)] = obj[start:stop] if rows else obj
            return memo[id(obj)]
        if isinstance(obj, KVCache):
            return KVCache(take(obj.keys), take(obj.values), take(obj.positions, shared=True))
        return _rebuild(obj, take)

    return replace(take(state), batch_size=stop - start)


def concat_rows(states: list[ModelState]) -> ModelState:
    """The rows of several states of one stream position, in order: the inverse of
    ``take_rows`` (per-rank stream states -> the global one). KV-cache positions and other
    shared values must agree; ValueError otherwise."""
    if not states:
        raise ValueError("concat_rows needs at least one state")
    sizes = [s.batch_size for s in states]
    memo: dict[tuple[int, ...], torch.Tensor] = {}

    def cat(nodes: list[Any], shared: bool = False) -> Any:
        first = nodes[0]
        if isinstance(first, torch.Tensor):
            key = tuple(id(n) for n in nodes)
            if key not in memo:
                rows = (
                    not shared and first.ndim and all(n.shape[0] == b for n, b in zip(nodes, sizes))
                )
                if not rows and not all(torch.equal(first, n) for n in nodes[1:]):
                    raise ValueError("the states differ in a value their rows share")
                memo[key] = torch.cat(nodes) if rows else first
            return memo[key]
        if isinstance(first, KVCache):
            return KVCache(
                cat([n.keys for n in nodes]),
                cat([n.values for n in nodes]),
                cat([n.positions for n in nodes], shared=True),
            )
        if is_dataclass(first) and not isinstance(first, type):
            return replace(
                first, **{f.name: cat([getattr(n, f.name) for n in nodes]) for f in fields(first)}
            )
        if isinstance(first, dict):
            if any(set(n) != set(first) for n in nodes):
                raise ValueError("the states differ in structure (dict keys)")
            return {key: cat([n[key] for n in nodes]) for key in first}
        if isinstance(first, list | tuple):
            if any(len(n) != len(first) for n in nodes):
                raise ValueError("the states differ in structure (sequence lengths)")
            return type(first)(cat(list(group)) for group in zip(*nodes))
        return first

    if any(s.position != states[0].position or s.model != states[0].model for s in states):
        raise ValueError("concat_rows needs states of one model at one stream position")
    return replace(cat(states), batch_size=sum(sizes))


def _rebuild(obj: Any, fn) -> Any:
    """``obj`` with ``fn`` applied to each child (dataclass fields, dict values, items)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return replace(obj, **{f.name: fn(getattr(obj, f.name)) for f in fields(obj)})
    if isinstance(obj, dict):
        return {key: fn(value) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(fn(value) for value in obj)
    return obj
