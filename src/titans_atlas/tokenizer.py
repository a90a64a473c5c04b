"""Tokenizers: text <-> token ids, kept out of the models (the engine works on ids only).

Every tokenizer has the same small surface -- ``encode(text) -> list[int]``,
``decode(ids) -> str``, ``vocab_size``, ``eos_id`` (None when it has no end-of-text token) and
``name`` -- and can be written beside a checkpoint with ``save(directory)`` and read back with
``load_tokenizer(directory)``, so a saved model always travels with the tokenizer it was
trained with.

``load_tokenizer(spec)`` takes ``"bytes"`` (the default: 256 byte values, nothing to
download), ``"ids"`` (no text: ids written as decimal numbers, what a model trained on a
synthetic task saves), ``"gpt2"`` (GPT-2 BPE from files a package installs, see ``bpe.py``),
``"hf:NAME_OR_PATH"`` (a Hugging Face tokenizer: a ``tokenizer.json`` file, a folder holding
one, or a name ``transformers`` can load), or a checkpoint directory holding
``tokenizer_spec.json``. Kinds live in ``TOKENIZERS``; the optional ones import their
dependencies only when used.
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


class HFTokenizer:
    """A Hugging Face ``tokenizers.Tokenizer``; saved as ``tokenizer.json`` beside the spec, so
    a checkpoint carries its own copy."""

    name = "hf"

    def __init__(self, backend, source: str) -> None:
        self.backend, self.source = backend, source
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        vocab = backend.get_vocab(with_added_tokens=True)
        eos = next((t for t in ("<|endoftext|>", "</s>", "<eos>", "[SEP]") if t in vocab), None)
        self.eos_id = vocab[eos] if eos is not None else None

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=False)

    def save(self, directory: str | Path) -> None:
        write_spec(directory, {"kind": self.name, "file": HF_FILE, "source": self.source})
        self.backend.save(str(Path(directory) / HF_FILE))

    @classmethod
    def from_spec(cls, spec: dict, directory: Path | None) -> HFTokenizer:
        source = str(spec.get("name") or spec.get("source") or "")
        path = directory / spec.get("file", HF_FILE) if directory is not None else Path(source)
        if path.is_dir():
            path = path / HF_FILE
        try:
            import tokenizers
        except ImportError as err:
            raise ValueError(
                "hf tokenizers need the tokenizers package (pip install tokenizers)"
            ) from err
        if path.is_file():
            try:
                return cls(tokenizers.Tokenizer.from_file(str(path)), source)
            except Exception as err:  # tokenizers raises its own exception type
                raise ValueError(f"{path} is not a readable tokenizer.json: {err}") from err
        if directory is not None:  # a saved spec always writes its file beside itself
            raise ValueError(f"{path} is missing: {directory / SPEC_FILE} names it")
        try:  # a hub name: transformers knows the local cache
            from transformers import AutoTokenizer

            say_network(f"tokenizer {source!r}")
            fast = AutoTokenizer.from_pretrained(source)
        except Exception as err:  # any failure means "cannot load this name"
            raise ValueError(f"cannot load Hugging Face tokenizer {source!r}: {err}") from err
        return cls(fast.backend_tokenizer, source)


def say_network(what: str) -> None:
    """One stderr line before a Hugging Face hub lookup, which can retry for a minute when
    the network is unreachable: the user knows what the wait is."""
    import os
    import sys

    if os.environ.get("HF_HUB_OFFLINE") not in ("1", "true", "True"):
        print(
            f"{what} is not a local file or folder: asking the Hugging Face hub (network; "
            "HF_HUB_OFFLINE=1 makes it fail at once)",
            file=sys.stderr,
            flush=True,
        )


def _gpt2(spec: dict, directory: Path | None) -> Tokenizer:
    from .bpe import GPT2Tokenizer  # imports regex, an extra, only when asked for

    return GPT2Tokenizer.from_spec(spec, directory)


HF_FILE = "tokenizer.json"
# kind -> constructor from (spec dict, checkpoint directory or None)
TOKENIZERS: dict[str, Callable[[dict, Path | None], Tokenizer]] = {
    "bytes": ByteTokenizer.from_spec,
    "ids": IdTokenizer.from_spec,
    "gpt2": _gpt2,
    "hf": HFTokenizer.from_spec,
}


def write_spec(directory: str | Path, spec: dict) -> None:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / SPEC_FILE).write_text(json.dumps(spec, indent=2) + "\n")


def load_tokenizer(spec: str | Path = "bytes") -> Tokenizer:
    """A tokenizer by kind name (``"bytes"``, or another registered kind) or from a directory
    that a tokenizer was saved into (a checkpoint). Raises ValueError naming what is wrong."""
    if isinstance(spec, str) and spec in TOKENIZERS and spec != "hf":
        return TOKENIZERS[spec]({"kind": spec}, None)
    if isinstance(spec, str) and spec.startswith("hf:"):
        return HFTokenizer.from_spec({"kind": "hf", "name": spec[3:]}, None)
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
        f"tokenizer {str(spec)!r} is neither a known kind {sorted(TOKENIZERS)}, 'hf:NAME_OR_PATH', "
        f"nor a directory holding {SPEC_FILE}"
    )


def model_tokenizer_spec(directory: str | Path, vocab_size: int) -> dict:
    """The tokenizer spec saved beside a model in ``directory``. Without one the model is
    taken to be byte-level only when it has the bytes tokenizer's 256 ids; for any other
    vocabulary the tokenizer is unknown (a 64-id task model read as bytes would emit ids it
    was never trained on), a ValueError naming the file."""
    path = Path(directory) / SPEC_FILE
    if path.is_file():
        try:
            spec = json.loads(path.read_text())
        except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
            raise ValueError(f"{path} is not valid JSON: {err}") from err
        if not isinstance(spec, dict) or "kind" not in spec:
            raise ValueError(f"{path} does not name a tokenizer kind")
        return spec
    if vocab_size != ByteTokenizer.vocab_size:
        raise ValueError(
            f"{directory} has no {SPEC_FILE}, and its model's {vocab_size} ids are not the bytes "
            f"tokenizer's {ByteTokenizer.vocab_size}: the tokenizer it was trained with is "
            f'unknown; copy {SPEC_FILE} from its training run or write one (e.g. {{"kind": '
            f'"ids", "vocab_size": {vocab_size}}} for a synthetic task)'
        )
    return {"kind": "bytes"}


def load_model_tokenizer(directory: str | Path, vocab_size: int) -> Tokenizer:
    """The tokenizer of the model saved in ``directory`` (see ``model_tokenizer_spec``); its
    ids must fit the model's vocabulary of ``vocab_size``."""
    spec = model_tokenizer_spec(directory, vocab_size)
    if (Path(directory) / SPEC_FILE).is_file():
        tokenizer = load_tokenizer(directory)
    else:
        tokenizer = TOKENIZERS[spec["kind"]](spec, None)
    if tokenizer.vocab_size > vocab_size:
        raise ValueError(
            f"tokenizer {tokenizer.name!r} has {tokenizer.vocab_size} ids but the model in "
            f"{directory} has a vocabulary of {vocab_size}"
        )
    return tokenizer
