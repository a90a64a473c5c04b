"""Every data path reads the documents it names; batchers resume from a plain-data cursor."""

import json
from itertools import pairwise

import numpy as np
import pytest
import torch

from titans_atlas.tokenizers import ByteTokenizer
from titans_atlas.train import DataConfig, PackedBatches, StreamBatches, load_corpus
from titans_atlas.train.data import Corpus, read_shards, tokenize_documents
from titans_atlas.train.data.batches import IGNORE, CorpusStreams, SequentialStreams
from titans_atlas.train.data.prepare import prepare

DOCS = ["first document\n", "the second one, a little longer\n", "third ✓\n"]


def _texts(corpus: Corpus) -> list[str]:
    out = []
    for tokens, bounds in corpus.parts:
        out += [bytes(tokens[a:b].tolist()).decode() for a, b in pairwise(bounds)]
    return out


@pytest.fixture
def folder(tmp_path):
    for i, text in enumerate(DOCS):
        (tmp_path / f"doc{i}.txt").write_text(text)
    return tmp_path


def test_text_file_folder_and_glob(folder):
    tok = ByteTokenizer()
    assert _texts(load_corpus(DataConfig(source=str(folder / "doc1.txt")), tok)) == [DOCS[1]]
    assert _texts(load_corpus(DataConfig(source=str(folder)), tok)) == DOCS
    assert _texts(load_corpus(DataConfig(source=str(folder / "doc[02].txt")), tok)) == [
        DOCS[0],
        DOCS[2],
    ]
    with pytest.raises(ValueError, match="no readable file"):
        load_corpus(DataConfig(source=str(folder / "nothing*.txt")), tok)


def test_jsonl_with_a_text_field(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"body": t, "id": i}) + "\n" for i, t in enumerate(DOCS)))
    corpus = load_corpus(DataConfig(source=str(path), text_field="body"), ByteTokenizer())
    assert _texts(corpus) == DOCS
    with pytest.raises(ValueError, match="text field 'text'"):
        load_corpus(DataConfig(source=str(path)), ByteTokenizer())


def test_builtin_text_needs_no_download():
    corpus = load_corpus(DataConfig(), ByteTokenizer())
    assert corpus.num_tokens > 250_000 and len(corpus.parts[0][1]) == 3  # two plays
    assert "HAMLET:" in bytes(corpus.parts[0][0][:300000].tolist()).decode(errors="replace")


def test_prepare_writes_memmapped_shards_with_document_bounds(folder, tmp_path):
    out = tmp_path / "shards"
    meta = prepare([str(folder)], out, ByteTokenizer(), shard_tokens=40)
    assert len(meta["shards"]) == 2 and meta["dtype"] == "uint16"
    corpus, tokenizer = read_shards(out)
    assert isinstance(corpus.parts[0][0], np.memmap) and tokenizer.name == "bytes"
    assert _texts(corpus) == DOCS
    assert _texts(load_corpus(DataConfig(source=str(out)), tokenizer)) == DOCS
    (out / "shard_00001.bin").write_bytes(b"12")
    with pytest.raises(ValueError, match="truncated"):
        read_shards(out)
    with pytest.raises(ValueError, match="already holds shards"):
        prepare([str(folder)], out, ByteTokenizer())


def test_validation_split_cuts_documents_at_one_position():
    corpus = tokenize_documents(["a" * 60, "b" * 40], ByteTokenizer())
    train, val = corpus.split(0.3)
    assert (train.num_tokens, val.num_tokens) == (70, 30)
    assert _texts(train) == ["a" * 60, "b" * 10] and _texts(val) == ["b" * 30]


def test_hugging_face_dataset_from_a_local_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    data = datasets.Dataset.from_dict({"text": DOCS, "n": [1, 2, 3]})
    data.save_to_disk(str(tmp_path / "saved"))
    data.to_json(str(tmp_path / "files" / "part.jsonl"))
    tok = ByteTokenizer()
    for source in ("saved", "files"):
        for streaming in (False, True):
            config = DataConfig(source=f"hf:{tmp_path / source}", hf_streaming=streaming)
            texts = list(__import__("titans_atlas.train.data", fromlist=["x"]).hf_documents(config))
            assert texts == DOCS
        assert _texts(load_corpus(DataConfig(source=f"hf:{tmp_path / source}"), tok)) == DOCS


def test_packed_batches_cover_an_epoch_and_resume_from_the_cursor():
    corpus = tokenize_documents([bytes(range(200)).decode("latin-1")], ByteTokenizer())
    batches = PackedBatches(corpus, batch_size=2, seq_len=8, seed=3)
    first = [batches.next() for _ in range(3)]
    for batch in first:
        assert torch.equal(batch.inputs[:, 1:], batch.labels[:, :-1])
    cursor = json.loads(json.dumps(batches.state_dict()))
    more = [batches.next() for _ in range(30)]  # crosses an epoch
    again = PackedBatches(corpus, batch_size=2, seq_len=8, seed=3)
    again.load_state_dict(cursor)
    for batch in more:
        assert torch.equal(again.next().inputs, batch.inputs)


def test_stream_rows_read_consecutive_windows_pad_and_reset():
    docs = [bytes([65 + d] * n + [97 + d]).decode() for d, n in enumerate([20, 8, 29])]
    streams = CorpusStreams(tokenize_documents(docs, ByteTokenizer()), max_tokens=1000, seed=0)
    batches = StreamBatches(streams, batch_size=2, seq_len=8)
    read = {0: [], 1: []}  # per row: the streams it read, rebuilt from inputs + labels
    for _ in range(6):
        batch = batches.next()
        for row in range(2):
            count = int((batch.labels[row] != IGNORE).sum())
            inputs, labels = batch.inputs[row, :count], batch.labels[row, :count]
            assert torch.equal(inputs[1:], labels[:-1])  # labels are the next tokens
            assert (batch.labels[row, count:] == IGNORE).all()  # padding only at the end
            if batch.reset[row]:
                read[row].append(inputs[:1].tolist())
            read[row][-1] += labels.tolist()
    texts = [bytes(s).decode() for row in read.values() for s in row]
    assert set(docs) <= set(texts)  # each stream read whole and in order by one row
    assert all(any(doc.startswith(text) for doc in docs) for text in texts)  # never mixed


def test_sequential_streams_resume_mid_document():
    docs = [np.arange(k * 100, k * 100 + 20 + k) for k in range(5)]
    make = lambda: StreamBatches(SequentialStreams(lambda start: iter(docs[start:])), 2, 6)  # noqa: E731
    batches = make()
    for _ in range(3):
        batches.next()
    cursor = json.loads(json.dumps(batches.state_dict()))
    expected = [batches.next().inputs for _ in range(12)]  # wraps past the end of the source
    resumed = make()
    resumed.load_state_dict(cursor)
    for inputs in expected:
        assert torch.equal(resumed.next().inputs, inputs)
