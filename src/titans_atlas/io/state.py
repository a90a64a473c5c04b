"""Save and load stream states (``ModelState`` and everything inside it) without pickle: one
safetensors file whose tensors are the state's tensors and whose metadata holds the
structure as JSON (dataclasses by name, dicts, lists, numbers, strings).

A file names its dataclasses as ``"module:qualname"`` strings, which are looked up in
``state_classes()`` -- a fixed registry of the stream-state classes -- and never imported:
a file cannot make the program import or run anything. A tensor held in two places (MAC
keeps the memory's weights at the segment start) is stored once and comes back shared.
"""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from ..layers.attention import KVCache
from ..layers.neural_memory import MemoryLayerState
from ..models.blocks import HybridState
from ..models.mac import MACState
from ..models.state import ModelState
from ..ops.state import MemoryState

FORMAT = "titans-atlas-state"


@cache
def state_classes() -> dict[str, type]:
    """The dataclasses a state file may name, by the ``"module:qualname"`` it names them
    with: a fixed list, named here."""
    classes = (KVCache, MemoryLayerState, HybridState, MACState, ModelState, MemoryState)
    registry = {f"{cls.__module__}:{cls.__qualname__}": cls for cls in classes}
    # files written before ModelState moved to models/state.py name it where it was defined
    registry["titans_atlas.models.backbone:ModelState"] = ModelState
    return registry


def state_to_flat(state: Any) -> tuple[dict[str, torch.Tensor], Any]:
    """(tensors by key, JSON-able structure) of a state."""
    tensors: dict[str, torch.Tensor] = {}
    keys: dict[int, str] = {}

    def encode(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            if id(obj) not in keys:
                keys[id(obj)] = f"t{len(keys)}"
                tensors[keys[id(obj)]] = obj.detach().contiguous().clone()
            return {"tensor": keys[id(obj)]}
        if is_dataclass(obj) and not isinstance(obj, type):
            cls = type(obj)
            name = f"{cls.__module__}:{cls.__qualname__}"
            if state_classes().get(name) is not cls:  # a file that could never be loaded
                raise ValueError(f"cannot save a {name} inside a state: not a stream-state class")
            return {
                "dataclass": name,
                "fields": {f.name: encode(getattr(obj, f.name)) for f in fields(obj)},
            }
        if isinstance(obj, dict):
            if not all(isinstance(k, str) for k in obj):
                raise ValueError("a state dict must have string keys to be saved")
            return {"dict": {k: encode(v) for k, v in obj.items()}}
        if isinstance(obj, list | tuple):
            return {type(obj).__name__: [encode(v) for v in obj]}
        if obj is None or isinstance(obj, bool | int | float | str):
            return {"value": obj}
        raise ValueError(f"cannot save a {type(obj).__name__} inside a state")

    return tensors, encode(state)


# What each structure node holds: {"tensor": key}, {"dataclass": name, "fields": {...}}, ...
_NODE_TYPES: dict[str, type | tuple[type, ...]] = {
    "tensor": str, "dataclass": str, "dict": dict, "list": list, "tuple": list,
    "value": (type(None), bool, int, float, str),
}  # fmt: skip


def state_from_flat(tensors: dict[str, torch.Tensor], structure: Any) -> Any:
    """Inverse of ``state_to_flat``; ValueError on anything it did not write."""

    def decode(node: Any) -> Any:
        kind = next(iter(node), None) if isinstance(node, dict) else None
        body = node.get(kind) if kind is not None else None
        if kind not in _NODE_TYPES or not isinstance(body, _NODE_TYPES[kind]):
            raise ValueError(f"malformed state structure node {str(node)[:80]}")
        if len(node) != (2 if kind == "dataclass" else 1):
            raise ValueError(f"malformed state structure node {str(node)[:80]}")
        if kind == "tensor":
            if body not in tensors:
                raise ValueError(f"state structure names a missing tensor {body!r}")
            return tensors[body]
        if kind == "dataclass":
            cls, values = _dataclass(body), node.get("fields")
            if not isinstance(values, dict):
                raise ValueError(f"state class {body!r} has no fields table")
            try:
                return cls(**{k: decode(v) for k, v in values.items()})
            except TypeError as err:  # a field the class does not have, or one missing
                raise ValueError(f"state class {body!r}: {err}") from err
        if kind == "dict":
            return {k: decode(v) for k, v in body.items()}
        if kind == "list":
            return [decode(v) for v in body]
        if kind == "tuple":
            return tuple(decode(v) for v in body)
        return body  # a plain value

    return decode(structure)


def _dataclass(name: Any) -> type:
    """The registered class a file names; nothing is imported by a name read from a file."""
    registry = state_classes()
    if not isinstance(name, str) or name not in registry:
        raise ValueError(
            f"state file names class {name!r}, outside titans_atlas's stream-state classes "
            f"(a file may name only: {', '.join(sorted(registry))})"
        )
    return registry[name]


def save_state(state: Any, path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """Write ``state`` to ``path`` (one ``.safetensors`` file); ``metadata`` is kept beside."""
    tensors, structure = state_to_flat(state)
    meta = {"format": FORMAT, "structure": json.dumps(structure), **(metadata or {})}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata=meta)


def load_state(path: str | Path, device: str | torch.device = "cpu") -> tuple[Any, dict[str, str]]:
    """(state, metadata) from a file written by ``save_state``; ValueError if unreadable."""
    try:
        with safe_open(str(path), framework="pt", device=str(device)) as handle:
            meta = handle.metadata() or {}
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
    except (SafetensorError, OSError) as err:
        raise ValueError(f"cannot read state file {path}: {err}") from err
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} file")
    try:
        structure = json.loads(meta.pop("structure"))
    except (KeyError, json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{path} has no readable state structure") from err
    meta.pop("format")
    try:
        return state_from_flat(tensors, structure), meta
    except (ValueError, RecursionError) as err:  # RecursionError: absurdly deep nesting
        raise ValueError(f"{path} holds no loadable stream state: {err}") from err
