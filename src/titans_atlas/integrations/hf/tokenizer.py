"""Our tokenizers as Hugging Face tokenizers, and back.

Each tokenizer kind (``tokenizer_spec.json``'s ``"kind"``) has a ``TokenizerBridge`` in
``BRIDGES``: ``to_hf`` builds the HF tokenizer saved beside the weights of an HF folder,
``from_hf`` writes our tokenizer into a model directory converted back from one. ``"bytes"``
is here; further kinds (GPT-2 BPE, any HF tokenizer) plug in with one entry each.

The byte-level tokenizer is a ``tokenizers`` model -- GPT-2's byte-to-character map with no
merges, so id = byte value -- saved as a plain ``tokenizer.json`` that any ``transformers``
install loads with ``AutoTokenizer``. It round-trips exactly as ``ByteTokenizer``: encode is
``list(text.encode("utf-8"))``, decode replaces broken UTF-8 by U+FFFD like
``bytes.decode(errors="replace")``. Its pad token is byte 0 (NUL), used only to pad batches
(the attention mask hides it); ``split_special_tokens=True`` keeps a NUL or U+0100 in text an
ordinary byte, and ``skip_special_tokens=True`` drops NUL bytes when decoding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer as TokenizersModel
from tokenizers import decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from ...tokenizers import ByteTokenizer, model_tokenizer_spec

BYTE_PAD_ID = 0
_PROBE = "Titans \x00 Ā é 世界 🎉\n\t<pad>"  # ASCII, NUL, U+0100 (the pad's character), multibyte


def _byte_to_char() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters (the alphabet
    of ``tokenizers``' ByteLevel pre-tokenizer and decoder)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    chars, shifted = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + shifted)
            shifted += 1
    return chars


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """The HF tokenizer equal to ``ByteTokenizer``: ids are UTF-8 byte values (vocab 256)."""
    chars = _byte_to_char()
    backend = TokenizersModel(models.BPE(vocab={chars[b]: b for b in range(256)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=chars[BYTE_PAD_ID],
        split_special_tokens=True,
        clean_up_tokenization_spaces=False,
        padding_side="left",
    )


def _bytes_from_hf(spec: dict, hf_dir: Path, out_dir: Path) -> None:
    """Write ``ByteTokenizer``'s spec, after checking the folder's tokenizer (if any) is one."""
    if any((hf_dir / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        tokenizer = AutoTokenizer.from_pretrained(str(hf_dir))
        if tokenizer(_PROBE, add_special_tokens=False)["input_ids"] != list(_PROBE.encode()):
            raise ValueError(
                f"{hf_dir} says its tokenizer is 'bytes' but its tokenizer files do not encode "
                "text as UTF-8 bytes"
            )
    ByteTokenizer().save(out_dir)


@dataclass(frozen=True)
class TokenizerBridge:
    """How one tokenizer kind crosses over: ``to_hf(spec, model_dir | None)`` -> HF tokenizer;
    ``from_hf(spec, hf_dir, model_dir)`` writes ours (``tokenizer_spec.json`` and its files)."""

    to_hf: Callable[[dict, Path | None], PreTrainedTokenizerBase]
    from_hf: Callable[[dict, Path, Path], None]


BRIDGES: dict[str, TokenizerBridge] = {
    "bytes": TokenizerBridge(lambda spec, directory: byte_level_tokenizer(), _bytes_from_hf),
}


def read_spec(model_dir: str | Path, vocab_size: int) -> dict:
    """A model directory's tokenizer spec; without one, bytes only for a 256-id model
    (``tokenizer.model_tokenizer_spec``)."""
    return model_tokenizer_spec(model_dir, vocab_size)


def _bridge(spec: dict) -> TokenizerBridge:
    kind = spec.get("kind")
    if kind not in BRIDGES:
        raise ValueError(
            f"no Hugging Face bridge for tokenizer kind {kind!r} (known: {sorted(BRIDGES)}); "
            "add one to titans_atlas.integrations.hf.tokenizer.BRIDGES"
        )
    return BRIDGES[kind]


def to_hf_tokenizer(spec: dict, model_dir: str | Path | None = None) -> PreTrainedTokenizerBase:
    """The HF tokenizer for our tokenizer ``spec`` (read with ``read_spec``)."""
    return _bridge(spec).to_hf(spec, None if model_dir is None else Path(model_dir))


def from_hf_tokenizer(spec: dict, hf_dir: str | Path, model_dir: str | Path) -> None:
    """Write our tokenizer for ``spec`` into ``model_dir``, from the HF folder ``hf_dir``."""
    _bridge(spec).from_hf(spec, Path(hf_dir), Path(model_dir))
