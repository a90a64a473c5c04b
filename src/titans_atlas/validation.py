"""Argument checks at the public boundaries. Each raises ValueError naming the argument.

One rule for the whole library (CONTRIBUTING.md, "Bad input"): types and ranges are checked
once per call where the user's input enters (configs, a model's forward, generation,
checkpoints), never in the hot path. Checks of tensor *values* (id range, finiteness) need a
host synchronisation: they run in eager mode and are skipped while ``torch.compile`` traces
(``compiling()``), so a compiled graph has no data-dependent branch.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

INTEGER_ID_DTYPES = (torch.int64, torch.int32, torch.int16, torch.uint8)


def compiling() -> bool:
    """True while torch.compile traces (value checks are skipped there)."""
    return torch.compiler.is_compiling()


def check_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> None:
    """``value`` must be an int (not a bool) in [minimum, maximum]."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
    if ok and maximum is not None:
        ok = value <= maximum
    if not ok:
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name} must be an integer {bound}, got {value!r}")


def check_number(
    name: str,
    value: Any,
    low: float,
    high: float | None = None,
    open_low: bool = True,
    open_high: bool = True,
) -> None:
    """``value`` must be a finite real number in the interval (low, high) (ends open by
    default); NaN and inf are always refused."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = value > low if open_low else value >= low
        if high is not None:
            ok = ok and (value < high if open_high else value <= high)
    if not ok:
        left, right = "(" if open_low else "[", ")" if open_high else "]"
        interval = f"{left}{low}, {high if high is not None else 'inf'}{right}"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value!r}")


def check_bool(name: str, value: Any) -> None:
    """``value`` must be True or False (a truthy string like "no" is not)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> None:
    choices = tuple(choices)
    if not any(value is c or (type(value) is type(c) and value == c) for c in choices):
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_token_ids(name: str, ids: Any, vocab_size: int | None) -> None:
    """``ids`` must be a ``[B, T]`` integer tensor with every id in [0, vocab_size). The range
    (a host sync) is compared in int64 -- a uint8 256 would wrap -- and skipped while
    compiling or when ``vocab_size`` is None."""
    if not isinstance(ids, torch.Tensor) or ids.ndim != 2:
        got = f"shape {list(ids.shape)}" if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"{name} must be a [B, T] tensor of token ids, got {got}")
    if ids.dtype not in INTEGER_ID_DTYPES:
        raise ValueError(
            f"{name} must hold integer token ids ({', '.join(map(str, INTEGER_ID_DTYPES))}), "
            f"got {ids.dtype}"
        )
    if vocab_size is not None and ids.numel() and not compiling():
        wide = ids.to(torch.int64)
        low, high = int(wide.min()), int(wide.max())
        if low < 0 or high >= vocab_size:
            raise ValueError(f"{name} must lie in [0, {vocab_size}), got ids from {low} to {high}")


def read_text_file(path: str | Path, what: str) -> str:
    """The text of a UTF-8 file. A file that is not UTF-8, or holds NUL bytes (a binary
    file), is a ValueError naming ``what`` and the file: read with replacement characters it
    would be trained or scored as altered data, its byte count (bits per byte) off."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:  # missing, a folder, unreadable
        raise ValueError(f"{what} {str(path)!r} cannot be read: {err.strerror}") from err
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        where = f"byte 0x{data[err.start]:02x} at offset {err.start}"
        raise not_text_error(path, what, where) from err
    if "\0" in text:
        raise not_text_error(path, what, f"a NUL byte at offset {data.index(0)}")
    return text


def not_text_error(path: str | Path, what: str, where: str) -> ValueError:
    """The error for a file that is not UTF-8 text (see ``read_text_file``)."""
    return ValueError(
        f"{what} {str(path)!r} is not UTF-8 text ({where}; a binary file or another "
        "encoding): convert it to UTF-8 (e.g. iconv -t UTF-8) or leave it out"
    )


def int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for an integer flag of at least ``minimum`` (and at most
    ``maximum``): argparse then names the flag in its one-line error (``argument
    --shard-tokens: must be an integer >= 1``)."""
    wanted = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be an integer {wanted}, got {text!r}")
        return value

    parse.__name__ = f"integer {wanted}"  # argparse's name for the type in messages
    return parse


# torch.manual_seed takes a signed 64-bit seed; a larger one fails deep in the sampler
MAX_SEED = 2**63 - 1


def check_device(name: str, value: Any) -> torch.device:
    """``value`` as a torch device this machine has; ValueError naming ``name`` for a name
    torch does not know or a GPU that is not there (CUDA used to fail deep in the model
    with a raw assertion)."""
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError) as err:
        raise ValueError(
            f"{name} must name a torch device (cpu, cuda, cuda:N), got {value!r}"
        ) from err
    if device.type not in ("cpu", "cuda", "mps"):  # "meta" holds no values to compute with
        raise ValueError(f"{name} must be cpu, cuda, cuda:N or mps, got {value!r}")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (device.index or 0) >= count:
            raise ValueError(
                f"{name}={value!r} but this machine has {count} CUDA device(s); use cpu"
            )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{name}={value!r} but MPS is not available here; use cpu")
    return device


def check_writable_dir(name: str, path: str | Path) -> None:
    """``path`` is a directory, or can be created as one, and is writable; ValueError naming
    ``name`` otherwise. Creates nothing (a refused command leaves no empty folder behind)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{name}={str(path)!r} is a file, not a directory")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{name}={str(path)!r} cannot be created: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{name}={str(path)!r} is not writable ({existing} denies writing)")


def check_writable_file(name: str, path: str | Path) -> None:
    """``path`` can be written as a file: not a directory, in a directory that exists or can
    be created and is writable; ValueError naming ``name``. Checked before the work whose
    result it will hold."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{name}={str(path)!r} is a directory, not a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{name}={str(path)!r} is not writable")
    check_writable_dir(f"the folder of {name}", path.parent)


def check_heads(dim: int, num_heads: int) -> None:
    """A width that splits into ``num_heads`` equal heads (ValueError naming both)."""
    if dim % num_heads:
        raise ValueError(f"dim={dim} must be divisible by num_heads={num_heads}")
