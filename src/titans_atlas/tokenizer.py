"""Tokenizers: text <-> token ids, kept out of the models (the engine works on ids only).

Every tokenizer has the same small surface -- ``encode(text) -> list[int]``,
``decode(ids) -> str``, ``vocab_size``, ``eos_id`` (None when it has no end-of-text token) and
``name`` -- and can be written beside a checkpoint with ``save(directory)`` and read back with
``load_tokenizer(directory)``, so a saved model always travels with the tokenizer it was
trained with.

``load_tokenizer(spec)`` takes ``"bytes"`` (the default: 256 byte values, nothing to
download) or a checkpoint directory holding ``tokenizer_spec.json``. Further kinds (GPT-2 BPE
offline, any Hugging Face tokenizer) register themselves in ``TOKENIZERS``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

SPEC_FILE = "tokenizer_spec.json"


@runtime_checkable
class Tokenizer(Protocol):
    name: str
    vocab_size: int
    eos_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def save(self, directory: str | Path) -> None: ...


class ByteTokenizer:
    """UTF-8 bytes as tokens: vocabulary 256, no end-of-text token, lossless on any text
    (``decode`` replaces a cut multi-byte character by U+FFFD)."""

    name = "bytes"
    vocab_size = 256
    eos_id = None

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def save(self, directory: str | Path) -> None:
        write_spec(directory, {"kind": self.name})

    @classmethod
    def from_spec(cls, spec: dict, directory: Path | None) -> ByteTokenizer:
        return cls()


# kind -> constructor from (spec dict, checkpoint directory or None)
TOKENIZERS: dict[str, Callable[[dict, Path | None], Tokenizer]] = {"bytes": ByteTokenizer.from_spec}


def write_spec(directory: str | Path, spec: dict) -> None:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / SPEC_FILE).write_text(json.dumps(spec, indent=2) + "\n")


def load_tokenizer(spec: str | Path = "bytes") -> Tokenizer:
    """A tokenizer by kind name (``"bytes"``, or another registered kind) or from a directory
    that a tokenizer was saved into (a checkpoint). Raises ValueError naming what is wrong."""
    if isinstance(spec, str) and spec in TOKENIZERS:
        return TOKENIZERS[spec]({"kind": spec}, None)
    path = Path(spec)
    if (path / SPEC_FILE).is_file():
        try:
            saved = json.loads((path / SPEC_FILE).read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path / SPEC_FILE} is not valid JSON: {err}") from err
        kind = saved.get("kind") if isinstance(saved, dict) else None
        if kind not in TOKENIZERS:
            raise ValueError(f"{path / SPEC_FILE} names unknown tokenizer kind {kind!r}")
        return TOKENIZERS[kind](saved, path)
    raise ValueError(
        f"tokenizer {str(spec)!r} is neither a known kind {sorted(TOKENIZERS)} nor a directory "
        f"holding {SPEC_FILE}"
    )
