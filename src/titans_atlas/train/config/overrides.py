"""Applying settings to a ``RunConfig``: ``section.field=value`` overrides and nested dicts
from config files, each key checked against the dataclass fields. Kept apart from the
dataclasses in ``config.py`` so that file stays a readable list of settings."""

from __future__ import annotations

import difflib
import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, TypeVar

from ...layers.memory_config import MemoryConfig
from ...models.config import ModelConfig

Config = TypeVar("Config")  # a RunConfig: a dataclass of section dataclasses


def suggest(key: str, valid: list[str]) -> str:
    """The tail of an unknown-name error: the closest valid names, else all of them."""
    close = difflib.get_close_matches(key, valid, n=3, cutoff=0.5)
    return f"; did you mean {' / '.join(close)}?" if close else f"; valid: {', '.join(valid)}"


def _model_fields() -> list[str]:
    return sorted({f.name for f in fields(ModelConfig)} | {f.name for f in fields(MemoryConfig)})


def set_value(config: Config, key: str, value: Any, *, text: bool = True) -> Config:
    """A copy of ``config`` with ``section.field`` (or ``model.<ModelConfig field>``, or
    ``data.task_args.<argument>``: one argument, the others kept) set. ``text``: a string
    value is command-line text, read as JSON (``"4"`` -> 4); a config file's values are
    typed already (``text=False``), so a string there stays a string and is checked as one."""
    section, _, name = key.partition(".")
    sections = [f.name for f in fields(config)]
    if section not in sections or not name:
        raise ValueError(f"unknown setting {key!r}: use section.field{suggest(section, sections)}")
    part = getattr(config, section)
    if section == "model" and name not in ("name", "preset", "overrides"):
        valid = _model_fields()
        if name.removeprefix("memory.") not in valid:
            raise ValueError(f"unknown model setting {name!r}{suggest(name, valid)}")
        value = _parse(value) if text and isinstance(value, str) else value  # the model checks
        part = replace(part, overrides={**part.overrides, name.removeprefix("memory."): value})
    elif name.startswith("task_args.") and section == "data":  # one task argument
        argument = name.removeprefix("task_args.")
        value = _parse(value) if text and isinstance(value, str) else value
        part = replace(part, task_args={**part.task_args, argument: value})
    else:
        valid = [f.name for f in fields(part)]
        if name not in valid:
            raise ValueError(f"unknown setting {key!r}{suggest(name, valid)}")
        kind = str(next(f.type for f in fields(part) if f.name == name))
        part = replace(part, **{name: _coerce(kind, value, key, text)})
    return replace(config, **{section: part})


def _parse(value: str) -> Any:
    """A command-line value as JSON (numbers, true/false, null, lists), else the string."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


# Field annotation -> (the Python types its values may have, how an error names them).
_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "bool": ((bool,), "true or false"),
    "bool | str": ((bool, str), "true, false or auto"),
    "int": ((int,), "a int"),  # "a int": the wording scripts and tests already match
    "float": ((float, int), "a float"),
    "str": ((str,), "a str"),
    "dict[str, Any]": ((dict,), "a table"),
}


def _coerce(kind: str, value: Any, key: str, text: bool = True) -> Any:
    """A setting's value checked against its field's type, the same way whether it comes
    from ``--set`` (a string, read as JSON unless the field is text) or from a config file
    or dict (already typed): ``steps = 3.5`` in a TOML file is refused like
    ``--set train.steps=3.5``. Ranges (NaN included) are the dataclasses' own checks."""
    base, optional = kind.removesuffix(" | None"), kind.endswith(" | None")
    if optional and (value is None or (text and value == "null")):  # back to None
        return None
    if text and isinstance(value, str) and base != "str":
        value = _parse(value)
    types, expected = _KINDS.get(base, ((object,), base))
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        valid = f"{expected}{' or null' if optional else ''}"
        raise ValueError(f"{key} takes {valid}, got {value!r} ({type(value).__name__})")
    return float(value) if base == "float" else value


def apply_nested(config: Config, data: dict[str, Any]) -> Config:
    """Apply a nested dict (a config file, or ``to_dict()`` output) field by field."""
    if not isinstance(data, dict):
        raise ValueError(f"a run config must be a table of sections, got {type(data).__name__}")
    for section, values in data.items():
        if section == "model" and isinstance(values, dict):
            for name in ("name", "preset"):
                if name in values:
                    config = set_value(config, f"model.{name}", values[name], text=False)
            overrides = values.get("overrides", {})
            if not isinstance(overrides, dict):
                raise ValueError(f"[model] overrides must be a table, got {overrides!r}")
            for name, value in {**overrides, **_flat_model(values)}.items():
                config = set_value(config, f"model.{name}", value, text=False)
        elif isinstance(values, dict):
            for name, value in values.items():
                config = set_value(config, f"{section}.{name}", value, text=False)
        elif section in {f.name for f in fields(config)}:  # a known section, not a table
            raise ValueError(f"[{section}] must be a table of settings, got {values!r}")
        else:
            config = set_value(config, section, values, text=False)  # raises: unknown name
    return config


def _flat_model(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k not in ("name", "preset", "overrides")}


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A TOML (``.toml``) or JSON file as a nested dict; ValueError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read config file {path} (UTF-8 TOML or JSON): {err}") from err
    try:
        if path.suffix == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                import tomli as tomllib
            return tomllib.loads(text)
        return json.loads(text)
    except (ValueError, RecursionError) as err:  # the decode errors are ValueErrors
        raise ValueError(f"{path} is not a valid config file: {err}") from err
