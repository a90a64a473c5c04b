"""Files read as text are UTF-8 text or refused by name (issue 37): a binary file or another
encoding used to be trained, prompted and scored with replacement characters, so perplexity's
byte count differed from the file's."""

import pytest

from titans_atlas.cli import main
from titans_atlas.eval.perplexity import iter_text_blocks
from titans_atlas.tokenizers import ByteTokenizer
from titans_atlas.train import DataConfig, load_corpus
from titans_atlas.validation import read_text_file

NOT_TEXT = {
    "latin-1": "café".encode("latin-1"),
    "binary": b"PK\x03\x04\x00\x00 zip",
    "cut": "naïve".encode()[:3],
}


@pytest.mark.parametrize("kind", NOT_TEXT)
def test_read_text_file_names_the_file_and_the_byte(tmp_path, kind):
    path = tmp_path / "f.txt"
    path.write_bytes(NOT_TEXT[kind])
    with pytest.raises(ValueError, match="is not UTF-8 text") as caught:
        read_text_file(path, "data file")
    assert str(path) in str(caught.value) and "offset" in str(caught.value)


@pytest.mark.parametrize("kind", NOT_TEXT)
def test_training_data_that_is_not_text_is_refused(tmp_path, kind):
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "a.txt").write_text("plain text " * 20)
    (tmp_path / "books" / "b.bin").write_bytes(NOT_TEXT[kind])
    config = DataConfig(source=str(tmp_path / "books"))
    with pytest.raises(ValueError, match=r"b\.bin"):
        load_corpus(config, ByteTokenizer())
    (tmp_path / "bad.jsonl").write_bytes(b'{"text": "ok"}\n{"text": "' + NOT_TEXT[kind] + b'"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl"):
        load_corpus(DataConfig(source=str(tmp_path / "bad.jsonl")), ByteTokenizer())


def test_hidden_files_and_folders_are_not_data(tmp_path):
    (tmp_path / "books" / ".git").mkdir(parents=True)
    (tmp_path / "books" / ".git" / "index").write_bytes(b"\x00\x01binary")
    (tmp_path / "books" / ".DS_Store").write_bytes(b"\x00\x00")
    (tmp_path / "books" / "a.txt").write_text("abc")
    corpus = load_corpus(DataConfig(source=str(tmp_path / "books")), ByteTokenizer())
    assert corpus.num_tokens == 3


@pytest.mark.parametrize("kind", NOT_TEXT)
def test_perplexity_text_is_read_strictly(tmp_path, kind):
    path = tmp_path / "t.txt"
    path.write_bytes(b"line one\n" * 10 + NOT_TEXT[kind])
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        list(iter_text_blocks(path))


def test_a_prompt_file_that_is_not_text_is_one_line(tmp_path, capsys):
    from titans_atlas import create_model

    create_model("lmm", preset="debug").save_pretrained(str(tmp_path / "m"))
    (tmp_path / "p").write_bytes(NOT_TEXT["latin-1"])
    argv = ["generate", "--checkpoint", str(tmp_path / "m"), "--prompt-file", str(tmp_path / "p")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--prompt-file" in err and "not UTF-8" in err and "Traceback" not in err
