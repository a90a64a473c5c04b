"""A Hugging Face ``tokenizers.Tokenizer`` (``hf:NAME_OR_PATH``), imported only when used."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .base import SPEC_FILE, write_spec

HF_FILE = "tokenizer.json"


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
        path = _saved_file(spec, directory) if directory is not None else Path(source)
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
        local = path.parent.is_dir() and path.name == HF_FILE  # a folder without the file
        try:  # a hub name (transformers knows the local cache), or a folder it can convert
            from transformers import AutoTokenizer

            if not local:
                say_network(f"tokenizer {source!r}")
            fast = AutoTokenizer.from_pretrained(source)
        except Exception as err:  # any failure means "cannot load this name"
            first = " ".join(str(err).split()) or type(err).__name__  # one line
            if local:
                raise ValueError(
                    f"folder {source!r} has no {HF_FILE}, and transformers cannot load a "
                    f"tokenizer from it either ({first})"
                ) from err
            raise ValueError(f"cannot load Hugging Face tokenizer {source!r}: {first}") from err
        return cls(fast.backend_tokenizer, source)


def _saved_file(spec: dict, directory: Path) -> Path:
    """The tokenizer file a saved spec names: one file name inside ``directory``. A spec is
    data from a checkpoint or a shards folder, so it may not point anywhere else (``..``, an
    absolute path, or a link leading out)."""
    name = spec.get("file", HF_FILE)
    where = directory / SPEC_FILE
    if not isinstance(name, str) or name in ("", ".", "..") or Path(name).name != name:
        raise ValueError(f'{where}: "file" must be one file name inside {directory}, got {name!r}')
    path = directory / name
    if not path.resolve().is_relative_to(directory.resolve()):
        raise ValueError(f'{where}: "file" {name!r} leads out of {directory} (a link)')
    return path


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
