"""Tokenizers: lossless round trips, saved beside a checkpoint and read back, clear errors."""

import pytest

from titans_atlas.tokenizer import SPEC_FILE, ByteTokenizer, Tokenizer, load_tokenizer


def test_bytes_round_trip_any_text():
    tok = load_tokenizer("bytes")
    text = "Hello, wörld -- ✓ \n\t\x00 end"
    ids = tok.encode(text)
    assert isinstance(tok, Tokenizer) and tok.vocab_size == 256 and tok.eos_id is None
    assert all(0 <= i < 256 for i in ids) and len(ids) == len(text.encode("utf-8"))
    assert tok.decode(ids) == text


def test_bytes_decode_of_a_cut_character_does_not_raise():
    ids = ByteTokenizer().encode("✓")[:2]
    assert ByteTokenizer().decode(ids) == "\ufffd"


def test_saved_tokenizer_loads_from_the_directory(tmp_path):
    ByteTokenizer().save(tmp_path)
    assert (tmp_path / SPEC_FILE).is_file()
    assert load_tokenizer(tmp_path).name == "bytes"


@pytest.mark.parametrize("spec", ["no-such-kind", "/no/such/dir"])
def test_unknown_tokenizer_is_a_value_error_naming_it(spec):
    with pytest.raises(ValueError, match="tokenizer"):
        load_tokenizer(spec)


def test_corrupt_spec_is_a_value_error(tmp_path):
    (tmp_path / SPEC_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_tokenizer(tmp_path)
    (tmp_path / SPEC_FILE).write_text('{"kind": "klingon"}')
    with pytest.raises(ValueError, match="unknown tokenizer kind"):
        load_tokenizer(tmp_path)
