"""The tokenizer surface and the two kinds that need nothing installed: bytes and ids.

``encode(text) -> list[int]``, ``decode(ids) -> str``, ``vocab_size``, ``eos_id`` (None when
there is no end-of-text token), ``name`` and ``save(directory)`` (writes ``tokenizer_spec.json``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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


def token_byte_lengths(tokenizer: Tokenizer) -> list[int]:
    """UTF-8 bytes each token id stands for (bits per byte divides by their sum). Exact for
    byte-level tokenizers; for others, the length of the token decoded on its own."""
    if isinstance(tokenizer, ByteTokenizer):
        return [1] * 256
    token_bytes = getattr(tokenizer, "token_bytes", None)
    if token_bytes is not None:
        return [len(token_bytes(i)) for i in range(tokenizer.vocab_size)]
    return [len(tokenizer.decode([i]).encode("utf-8")) for i in range(tokenizer.vocab_size)]


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


class IdTokenizer:
    """Token ids as text: ``encode("3 17 5") == [3, 17, 5]``. For models trained on synthetic
    tasks (``data.source = "task:..."``), whose ids stand for no text; saving it beside their
    checkpoints records the vocabulary so evaluation and generation can load them."""

    name = "ids"
    eos_id = None

    def __init__(self, vocab_size: int) -> None:
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 1:
            raise ValueError(f"vocab_size must be an int >= 1, got {vocab_size!r}")
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        try:
            ids = [int(word) for word in text.split()]
        except ValueError as err:
            raise ValueError(f"the ids tokenizer reads whitespace-separated ints: {err}") from err
        if any(not 0 <= i < self.vocab_size for i in ids):
            raise ValueError(f"ids must lie in [0, {self.vocab_size}), got {text!r}")
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(str(int(i)) for i in ids)

    def save(self, directory: str | Path) -> None:
        write_spec(directory, {"kind": self.name, "vocab_size": self.vocab_size})

    @classmethod
    def from_spec(cls, spec: dict, directory: Path | None) -> IdTokenizer:
        if "vocab_size" not in spec:
            raise ValueError("the ids tokenizer needs a vocab_size (in tokenizer_spec.json)")
        return cls(spec["vocab_size"])


def write_spec(directory: str | Path, spec: dict) -> None:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / SPEC_FILE).write_text(json.dumps(spec, indent=2) + "\n")
