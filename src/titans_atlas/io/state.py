"""Save and load stream states (``ModelState`` and everything inside it) without pickle: one
safetensors file whose tensors are the state's tensors and whose metadata holds the
structure as JSON (dataclasses by name, dicts, lists, numbers, strings).

A file names its dataclasses as ``"module:qualname"`` strings, which are looked up in
``state_classes()`` -- a fixed registry of the stream-state classes -- and never imported:
a file cannot make the program import or run anything. A tensor held in two places (MAC
keeps the memory's weights at the segment start) is stored once and comes back shared.

Everything a file holds is checked as it is read: each field of a stream-state class has the
type it must have (a position an integer in range, a chunk size an integer or null, a cache a
set of tensors), and a ``ModelState`` passes the model's own ``check_state`` against the model
its fingerprint names, values included (finite caches whose positions match the stream's),
so an edited file is refused naming the file and the field, never later inside the model.
"""

from __future__ import annotations

import json
import sys
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
from ..models.registry import MODELS
from ..models.state import (
    ModelState,
    check_fingerprint,
    check_position,
    check_state,
    described,
)
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
    """Inverse of ``state_to_flat``; ValueError on anything it did not write, naming the
    field (``state.blocks[0].memory...``) whose value has the wrong type."""

    def decode(node: Any, path: str) -> Any:
        kind = next(iter(node), None) if isinstance(node, dict) else None
        body = node.get(kind) if kind is not None else None
        if kind not in _NODE_TYPES or not isinstance(body, _NODE_TYPES[kind]):
            raise ValueError(f"malformed state structure node {str(node)[:80]} at {path}")
        if len(node) != (2 if kind == "dataclass" else 1):
            raise ValueError(f"malformed state structure node {str(node)[:80]} at {path}")
        if kind == "tensor":
            if body not in tensors:
                raise ValueError(f"state structure names a missing tensor {body!r} at {path}")
            return tensors[body]
        if kind == "dataclass":
            cls, values = _dataclass(body), node.get("fields")
            if not isinstance(values, dict):
                raise ValueError(f"state class {body!r} has no fields table")
            decoded = {k: decode(v, f"{path}.{k}") for k, v in values.items()}
            try:
                obj = cls(**decoded)
            except TypeError as err:  # a field the class does not have, or one missing
                raise ValueError(f"state class {body!r}: {err}") from err
            _check_fields(obj, path)
            return obj
        if kind == "dict":
            return {k: decode(v, f"{path}[{k!r}]") for k, v in body.items()}
        if kind == "list":
            return [decode(v, f"{path}[{i}]") for i, v in enumerate(body)]
        if kind == "tuple":
            return tuple(decode(v, f"{path}[{i}]") for i, v in enumerate(body))
        return body  # a plain value

    return decode(structure, "state")


# The type of every field of a stream-state class, as a file must hold it: a class, or
# "float" (a floating-point tensor), "tensors" (a dict of those by name), "position" (an
# integer in [0, 2**53]), "count" (an integer >= 1), "fingerprint"; a tuple of those and None
# for an optional field. A cache's tensors are checked by ``check_state``.
_TENSOR, _OPTIONAL_TENSOR = torch.Tensor, ("float", None)
_FIELD_TYPES: dict[type, dict[str, Any]] = {
    ModelState: {
        "position": "position", "blocks": list, "batch_size": "count", "fingerprint": "fingerprint",
    },
    MemoryState: {
        "weights": "tensors", "momentum": "tensors", "base": ("tensors", None),
        "position": "position", "halo_keys": _OPTIONAL_TENSOR, "halo_values": _OPTIONAL_TENSOR,
        "chunk_size": ("count", None), "omega_window": ("count", None),
    },
    MemoryLayerState: {
        "memory": MemoryState, "conv_q": _OPTIONAL_TENSOR, "conv_k": _OPTIONAL_TENSOR,
        "conv_v": _OPTIONAL_TENSOR, "omega": _OPTIONAL_TENSOR,
    },
    KVCache: {"keys": _TENSOR, "values": _TENSOR, "positions": _TENSOR},
    HybridState: {"attn": (KVCache, None), "memory": (MemoryLayerState, None)},
    MACState: {
        "memory": MemoryLayerState, "segment_weights": "tensors", "attn": (KVCache, None),
        "retrieve_conv": _OPTIONAL_TENSOR,
    },
}  # fmt: skip
_MAX_COUNT = 2**31
_WHAT = {
    "position": "an integer in [0, 2**53]",
    "count": "an integer in [1, 2**31]",
    "float": "a floating-point tensor",
    "tensors": "a dict of floating-point tensors by name",
    "fingerprint": "a tuple of (field, value) pairs",
    None: "null",
    list: "a list",
    tuple: "a tuple",
    torch.Tensor: "a tensor",
}


def _fits(value: Any, kind: Any) -> bool:
    if kind is None:
        return value is None
    if kind == "position":
        try:
            check_position("", value)
        except ValueError:
            return False
        return True
    if kind == "count":
        return not isinstance(value, bool) and isinstance(value, int) and 1 <= value <= _MAX_COUNT
    if kind == "float":
        return isinstance(value, torch.Tensor) and value.is_floating_point()
    if kind == "tensors":
        return isinstance(value, dict) and all(
            isinstance(k, str) and _fits(v, "float") for k, v in value.items()
        )
    if kind == "fingerprint":
        try:
            check_fingerprint(value)
        except ValueError:
            return False
        return True
    return isinstance(value, kind)


def _check_fields(obj: Any, path: str) -> None:
    """Every field of a stream-state class read from a file has its type (``_FIELD_TYPES``);
    a ModelState also passes ``check_state`` against the model its fingerprint names."""
    for name, kind in _FIELD_TYPES.get(type(obj), {}).items():
        value, kinds = getattr(obj, name), kind if isinstance(kind, tuple) else (kind,)
        if not any(_fits(value, k) for k in kinds):
            want = " or ".join(_WHAT.get(k) or f"a {k.__name__}" for k in kinds)
            raise ValueError(f"{path}.{name} must be {want}, got {_shown(value)}")
    if isinstance(obj, ModelState):
        _check_model_state(obj)


def _check_model_state(state: ModelState) -> None:
    """``check_state`` with the fingerprint's own model, values included: every check a
    model makes of a state but the one that needs the model (that it is the same one)."""
    check_fingerprint(state.fingerprint)
    fields = dict(state.fingerprint)
    name = fields.get("name")
    if name not in MODELS:
        raise ValueError(
            f"state.fingerprint names model {_shown(name)}, not one of {sorted(MODELS)}"
        )
    for field in ("dim", "depth", "num_heads", "window"):
        if not _fits(fields.get(field), "count"):
            raise ValueError(
                f"state.fingerprint's {field} must be {_WHAT['count']}, "
                f"got {_shown(fields.get(field))}"
            )
    if not isinstance(state.blocks, list) or len(state.blocks) != fields["depth"]:
        raise ValueError(
            f"state.blocks must be a list of the fingerprint's depth={fields['depth']} block states"
        )  # before the depth sizes anything: a file may claim a depth of 2**31
    kinds = (MODELS[name][0].block_class.state_class,) * fields["depth"]
    check_state(state, state.fingerprint, kinds, state.batch_size, values=True)


def _shown(value: Any) -> str:
    """A value read from a file, with its type: ``models.state.described``, and what a
    file can hold besides (tensors, a dict of them with a bad entry)."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor"
    if isinstance(value, dict) and any(not _fits(v, "float") for v in value.values()):
        key, bad = next((k, v) for k, v in value.items() if not _fits(v, "float"))
        return f"a dict whose [{str(key)[:30]!r}] is {_shown(bad)}"
    if not isinstance(value, type(None) | bool | int | float | str):
        return f"a {type(value).__name__}"
    return described(value)


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
    except ValueError as err:  # an integer past Python's digit limit: no field takes one
        raise ValueError(
            f"{path} has no readable state structure: it holds an integer of more than "
            f"{sys.get_int_max_str_digits()} digits, far past any value a state field takes"
        ) from err
    meta.pop("format")
    try:
        return state_from_flat(tensors, structure), meta
    except (ValueError, RecursionError) as err:  # RecursionError: absurdly deep nesting
        raise ValueError(f"{path} holds no loadable stream state: {err}") from err
