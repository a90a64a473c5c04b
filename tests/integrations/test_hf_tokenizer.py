"""The byte-level HF tokenizer equals ByteTokenizer exactly, saved and reloaded; other
tokenizer kinds plug in through BRIDGES and are refused clearly until they do."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer

from titans_atlas.integrations.hf import byte_level_tokenizer, export_hf, import_hf
from titans_atlas.integrations.hf.tokenizer import to_hf_tokenizer
from titans_atlas.tokenizers import ByteTokenizer, write_spec

TEXTS = [
    "hello world",
    "  leading spaces\n\ttabs and\r\nnewlines  ",
    "\x00NUL\x00 bytes",
    "Ā is the pad's character, <pad> and </s> are text",
    "héllo 世界 🎉 \u200b\U0010ffff",
    "",
]


def random_byte_ids(count: int, seed: int = 0) -> list[list[int]]:
    """Byte sequences rich in broken UTF-8 (lead bytes, stray continuations, overlongs)."""
    rng, tricky = random.Random(seed), [0x80, 0xBF, 0xC0, 0xC1, 0xC3, 0xE0, 0xED, 0xF0, 0xF4, 0xFF]
    return [
        [rng.choice([rng.randrange(256), rng.choice(tricky)]) for _ in range(rng.randrange(1, 12))]
        for _ in range(count)
    ]


@pytest.fixture(scope="module")
def reloaded(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tokenizer")
    byte_level_tokenizer().save_pretrained(str(directory))
    return AutoTokenizer.from_pretrained(str(directory))


@pytest.mark.parametrize("which", ["built", "reloaded"])
def test_byte_tokenizer_encodes_and_decodes_as_ours(which, reloaded):
    tokenizer, ours = byte_level_tokenizer() if which == "built" else reloaded, ByteTokenizer()
    for text in TEXTS:
        ids = tokenizer(text)["input_ids"]
        assert ids == ours.encode(text), text
        assert tokenizer.decode(ids) == text
    for ids in random_byte_ids(500):
        assert tokenizer.decode(ids) == ours.decode(ids), ids


def test_byte_tokenizer_pads_on_the_left_with_byte_zero(reloaded):
    batch = reloaded(["ab", "abcd"], padding=True)
    assert batch["input_ids"] == [[0, 0, 97, 98], [97, 98, 99, 100]]
    assert batch["attention_mask"] == [[0, 0, 1, 1], [1, 1, 1, 1]]


def test_unknown_tokenizer_kind_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="no Hugging Face bridge for tokenizer kind 'spm'"):
        to_hf_tokenizer({"kind": "spm"})


def test_export_writes_the_byte_tokenizer_and_import_checks_it(tmp_path, trained_dir):
    export_hf(trained_dir, tmp_path / "hf")
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert tokenizer("tête")["input_ids"] == list("tête".encode())
    # a folder whose tokenizer files are not byte-level is refused on the way back
    (tmp_path / "hf" / "tokenizer.json").write_text(
        (tmp_path / "hf" / "tokenizer.json").read_text().replace('"a": 97', '"a": 98')
    )
    with pytest.raises(ValueError, match="do not encode text as UTF-8 bytes"):
        import_hf(tmp_path / "hf", tmp_path / "back")


def test_export_of_an_unbridged_kind_names_it(tmp_path, trained_dir):
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((trained_dir / name).read_bytes())
    write_spec(tmp_path, {"kind": "gpt2"})
    with pytest.raises(ValueError, match="no Hugging Face bridge for tokenizer kind 'gpt2'"):
        export_hf(tmp_path, tmp_path / "hf")
