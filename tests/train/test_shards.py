"""Shard folders (issue 37): a failed `titans prepare` leaves nothing a training could read,
training refuses shard files without meta.json, and meta.json / bounds are checked."""

import json

import numpy as np
import pytest

from titans_atlas.tokenizers import ByteTokenizer
from titans_atlas.train import DataConfig, load_corpus
from titans_atlas.train.data import read_shards
from titans_atlas.train.data.prepare import prepare


@pytest.fixture
def books(tmp_path):
    (tmp_path / "books").mkdir()
    for i in range(3):
        (tmp_path / "books" / f"b{i}.txt").write_text(f"book {i} " * 20)
    return tmp_path / "books"


def test_a_prepare_that_fails_midway_removes_its_shards(books, tmp_path):
    (books / "b3.txt").write_bytes(b"\xff\xfe not text")  # read after the first shards
    out = tmp_path / "shards"
    with pytest.raises(ValueError, match=r"b3\.txt"):
        prepare([str(books)], out, ByteTokenizer(), shard_tokens=50)
    assert not out.exists()  # it created the folder, so it removes it again
    out.mkdir()
    (out / "mine.txt").write_text("kept")
    with pytest.raises(ValueError, match=r"b3\.txt"):
        prepare([str(books)], out, ByteTokenizer(), shard_tokens=50)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_training_refuses_shard_files_without_meta(books, tmp_path):
    out = tmp_path / "shards"
    prepare([str(books)], out, ByteTokenizer(), shard_tokens=50)
    (out / "meta.json").unlink()  # as a prepare killed before its last write leaves it
    with pytest.raises(ValueError, match=r"no meta\.json: an interrupted titans prepare"):
        load_corpus(DataConfig(source=str(out)), ByteTokenizer())
    with pytest.raises(ValueError, match=r"without meta\.json"):
        prepare([str(books)], out, ByteTokenizer())


def test_prepare_refuses_a_shard_size_below_one_and_an_out_that_is_a_file(books, tmp_path):
    with pytest.raises(ValueError, match="shard_tokens must be an integer >= 1"):
        prepare([str(books)], tmp_path / "s", ByteTokenizer(), shard_tokens=0)
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        prepare([str(books)], tmp_path / "f", ByteTokenizer())
    assert not (tmp_path / "s").exists()


def _damage(out, what):
    meta = json.loads((out / "meta.json").read_text())
    bounds = out / "shard_00000.bounds.npy"
    if what == "descending":
        values = np.load(bounds)
        values[1], values[2] = values[2], values[1]
        np.save(bounds, values)
    elif what == "not-ending-at-the-shard":
        np.save(bounds, np.load(bounds)[:-1])
    elif what == "float-bounds":
        np.save(bounds, np.load(bounds).astype(np.float64))
    elif what == "escaping-file":
        meta["shards"][0]["file"] = "../outside.bin"
    elif what == "negative-count":
        meta["shards"][0]["num_tokens"] = -4
    elif what == "dtype":
        meta["dtype"] = "float64"
    elif what == "no-shards":
        meta["shards"] = {}
    (out / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "what",
    ["descending", "not-ending-at-the-shard", "float-bounds", "escaping-file", "negative-count",
     "dtype", "no-shards"],
)  # fmt: skip
def test_damaged_shards_are_refused_by_name(books, tmp_path, what):
    out = tmp_path / "shards"
    meta = prepare([str(books)], out, ByteTokenizer(), shard_tokens=300)  # one shard, 3 books
    read_shards(out)
    (tmp_path / "outside.bin").write_bytes(b"\x00" * 2 * meta["num_tokens"])  # a fitting size
    _damage(out, what)
    with pytest.raises(ValueError, match=r"meta\.json|bounds|shard"):
        read_shards(out)


def test_shard_ids_outside_the_tokenizer_are_refused_at_load(books, tmp_path):
    # byte shards under an ids spec of 32: the embedding would fail on id 98 mid-run
    out = tmp_path / "shards"
    prepare([str(books)], out, ByteTokenizer(), shard_tokens=300)
    (out / "tokenizer_spec.json").write_text('{"kind": "ids", "vocab_size": 32}')
    with pytest.raises(
        ValueError, match=r"shard_00000\.bin holds id \d+, outside its tokenizer's 32"
    ):
        read_shards(out)
