"""Tokenizers: text <-> token ids, kept out of the models (the engine works on ids only).

Every tokenizer has the same small surface -- ``encode(text) -> list[int]``,
``decode(ids) -> str``, ``vocab_size``, ``eos_id`` (None when it has no end-of-text token) and
``name`` -- and can be written beside a checkpoint with ``save(directory)`` and read back with
``load_tokenizer(directory)``, so a saved model always travels with the tokenizer it was
trained with.

``load_tokenizer(spec)`` takes ``"bytes"`` (the default: 256 byte values, nothing to
download), ``"ids"`` (no text: ids written as decimal numbers, what a model trained on a
synthetic task saves), ``"gpt2"`` (GPT-2 BPE from files a package installs, ``bpe.py``),
``"hf:NAME_OR_PATH"`` (a Hugging Face tokenizer: a ``tokenizer.json`` file, a folder holding
one, or a name ``transformers`` can load), or a checkpoint directory holding
``tokenizer_spec.json``. Kinds live in ``TOKENIZERS``; the optional ones import their
dependencies only when used.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .base import (
    SPEC_FILE,
    ByteTokenizer,
    IdTokenizer,
    Tokenizer,
    token_byte_lengths,
    write_spec,
)
from .bpe import GPT2Tokenizer
from .hf import HF_FILE, HFTokenizer, say_network

# kind -> constructor from (spec dict, checkpoint directory or None)
TOKENIZERS: dict[str, Callable[[dict, Path | None], Tokenizer]] = {
    "bytes": ByteTokenizer.from_spec,
    "ids": IdTokenizer.from_spec,
    "gpt2": GPT2Tokenizer.from_spec,
    "hf": HFTokenizer.from_spec,
}


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


__all__ = [
    "HF_FILE",
    "SPEC_FILE",
    "TOKENIZERS",
    "ByteTokenizer",
    "GPT2Tokenizer",
    "HFTokenizer",
    "IdTokenizer",
    "Tokenizer",
    "load_model_tokenizer",
    "load_tokenizer",
    "model_tokenizer_spec",
    "say_network",
    "token_byte_lengths",
    "write_spec",
]
