"""Streamed perplexity: equal to one whole call, blocks that reassemble the file, bytes
counted right, the loss-by-position curve, and its plot."""

import math

import pytest
import torch
import torch.nn.functional as F
from eval_models import EosByteTokenizer

from titans_atlas import create_model
from titans_atlas.eval import EvalSettings, run_task, write_result
from titans_atlas.eval.perplexity import iter_text_blocks, stream_perplexity
from titans_atlas.tokenizers import ByteTokenizer

TEXT = "First line of text.\nSecond line, with more words!\n\n  indented line\nÜnïcödé ✓ end.\n" * 3


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


@torch.no_grad()
def one_call_nats(model, ids):
    logits, _ = model(torch.tensor([ids]))
    return F.cross_entropy(logits[0, :-1], torch.tensor(ids[1:]), reduction="none").double()


@pytest.mark.parametrize("name", ["lmm", "mac", "swa"])
@pytest.mark.parametrize("piece", [11, 64, 4096])
def test_streaming_equals_one_whole_call(text_file, name, piece):
    model = create_model(name, preset="debug", window=16, chunk_size=8).eval()
    ids = ByteTokenizer().encode(TEXT)
    expected = one_call_nats(model, ids)
    stats = stream_perplexity(model, ByteTokenizer(), text_file, piece_size=piece, bin_size=32)
    assert stats["tokens"] == len(ids) - 1
    assert stats["nats"] == pytest.approx(float(expected.sum()), rel=1e-5)
    # bytes scored: all but the first token's byte (it has nothing to be predicted from)
    assert stats["bytes"] == len(TEXT.encode("utf-8")) - 1
    assert stats["bits_per_byte"] == pytest.approx(stats["nats"] / math.log(2) / stats["bytes"])
    for point in stats["curve"]:
        chosen = expected[max(0, point["start"] - 1) : point["end"] - 1]  # token p is row p-1
        assert point["tokens"] == chosen.numel()
        assert point["loss"] == pytest.approx(float(chosen.mean()), rel=1e-5)


def test_a_start_token_scores_every_text_token(text_file):
    tokenizer = EosByteTokenizer()
    model = create_model("lmm", preset="debug", vocab_size=257).eval()
    ids = [256, *tokenizer.encode(TEXT)]
    stats = stream_perplexity(model, tokenizer, text_file, piece_size=13)
    assert stats["tokens"] == len(ids) - 1 and stats["bytes"] == len(TEXT.encode("utf-8"))
    assert stats["nats"] == pytest.approx(float(one_call_nats(model, ids).sum()), rel=1e-5)


def test_max_tokens_cuts_the_stream(text_file):
    model = create_model("lmm", preset="debug").eval()
    stats = stream_perplexity(model, ByteTokenizer(), text_file, max_tokens=50, piece_size=16)
    assert stats["tokens"] == 49 and stats["bytes"] == 49
    ids = ByteTokenizer().encode(TEXT)[:50]
    assert stats["nats"] == pytest.approx(float(one_call_nats(model, ids).sum()), rel=1e-5)


def test_blocks_reassemble_the_file_and_cut_before_a_word(tmp_path):
    text = "".join(f"line {i}\n\n   indented {i}\n" for i in range(3000))
    path = tmp_path / "big.txt"
    path.write_text(text)
    blocks = list(iter_text_blocks(path, block_chars=1000))
    assert "".join(blocks) == text and len(blocks) > 10
    assert all(b.endswith("\n") and not b.endswith("\n\n") for b in blocks[:-1])


def test_missing_file_and_task_without_text_are_errors(tmp_path):
    model = create_model("lmm", preset="debug")
    with pytest.raises(ValueError, match="does not exist"):
        stream_perplexity(model, ByteTokenizer(), tmp_path / "nope.txt")
    with pytest.raises(ValueError, match="--text"):
        run_task("perplexity", model, ByteTokenizer(), EvalSettings())


def test_perplexity_task_writes_its_curve_plot(text_file, tmp_path):
    pytest.importorskip("matplotlib")
    model = create_model("swa", preset="debug").eval()
    result = run_task(
        "perplexity", model, ByteTokenizer(), EvalSettings(text=str(text_file), bin_size=16)
    )
    assert result["summary"]["tokens"] == len(TEXT.encode()) - 1
    assert result["samples"][0]["memory_trace"]
    _, png = write_result(result, tmp_path / "out")
    assert png.stat().st_size > 1000
