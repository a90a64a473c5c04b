"""Save and load stream states (``ModelState`` and everything inside it) without pickle: one
safetensors file whose tensors are the state's tensors and whose metadata holds the
structure as JSON (dataclasses by name, dicts, lists, numbers, strings).

Only dataclasses defined inside ``titans_atlas`` are rebuilt, so a file cannot name
arbitrary code. A tensor held in two places (MAC keeps the memory's weights at the segment
start) is stored once and comes back shared.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

FORMAT = "titans-atlas-state"
ALLOWED_PREFIX = "titans_atlas."


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


def state_from_flat(tensors: dict[str, torch.Tensor], structure: Any) -> Any:
    """Inverse of ``state_to_flat``; ValueError on anything it did not write."""

    def decode(node: Any) -> Any:
        if not isinstance(node, dict) or len(node) not in (1, 2):
            raise ValueError(f"malformed state structure node {str(node)[:80]}")
        if "tensor" in node:
            if node["tensor"] not in tensors:
                raise ValueError(f"state structure names a missing tensor {node['tensor']!r}")
            return tensors[node["tensor"]]
        if "dataclass" in node:
            return _dataclass(node["dataclass"])(
                **{k: decode(v) for k, v in node["fields"].items()}
            )
        if "dict" in node:
            return {k: decode(v) for k, v in node["dict"].items()}
        if "list" in node:
            return [decode(v) for v in node["list"]]
        if "tuple" in node:
            return tuple(decode(v) for v in node["tuple"])
        if "value" in node:
            return node["value"]
        raise ValueError(f"malformed state structure node {str(node)[:80]}")

    return decode(structure)


def _dataclass(name: str) -> type:
    module, _, qualname = name.partition(":")
    if not module.startswith(ALLOWED_PREFIX):
        raise ValueError(f"state file names class {name!r} outside titans_atlas")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not (isinstance(obj, type) and is_dataclass(obj)):
        raise ValueError(f"state file names unknown class {name!r}")
    return obj


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
    except (KeyError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} has no readable state structure") from err
    meta.pop("format")
    return state_from_flat(tensors, structure), meta
