"""A trained checkpoint end to end: ``titans export`` to an HF folder, then
``pipeline("text-generation")`` on it gives our greedy continuation, alone and batched."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from hf_helpers import SENTENCE
from transformers import pipeline

import titans_atlas as ta
from titans_atlas.cli import main
from titans_atlas.generation import generate
from titans_atlas.tokenizers import ByteTokenizer

PROMPTS = ["the cat ", "on the", "mat. the cat sat"]


@pytest.fixture(scope="module")
def hf_dir(trained_dir, tmp_path_factory):
    directory = tmp_path_factory.mktemp("hf") / "folder"
    assert main(["export", "--format", "hf", str(trained_dir), str(directory)]) == 0
    return directory


def our_continuation(model: ta.LanguageModel, text: str, new_tokens: int) -> str:
    tokenizer = ByteTokenizer()
    ids = torch.tensor([tokenizer.encode(text)])
    return tokenizer.decode(generate(model, ids, new_tokens, greedy=True)[0].tolist())


def test_pipeline_gives_our_greedy_continuation(trained_dir, hf_dir):
    model = ta.load_model(trained_dir)
    generator = pipeline("text-generation", model=str(hf_dir), tokenizer=str(hf_dir))
    out = generator(PROMPTS[0], max_new_tokens=16, do_sample=False)[0]["generated_text"]
    assert out == our_continuation(model, PROMPTS[0], 16)
    # the trained weights, not an init: whole words of the sentence (which word comes next,
    # and whether a period follows "mat", are near ties for this tiny model that move with
    # the initialisation and the machine's BLAS)
    words = {word.strip(".") for word in out.split()[:-1]}  # the last one may be cut off
    assert len(out.split()) >= 5 and words <= set(SENTENCE.replace(".", "").split()), out


def test_batched_pipeline_equals_one_prompt_at_a_time(trained_dir, hf_dir):
    model = ta.load_model(trained_dir)
    generator = pipeline("text-generation", model=str(hf_dir), tokenizer=str(hf_dir))
    outs = generator(PROMPTS, max_new_tokens=12, do_sample=False, batch_size=3)
    assert [out[0]["generated_text"] for out in outs] == [
        our_continuation(model, text, 12) for text in PROMPTS
    ]


def test_cli_converts_the_folder_back(trained_dir, hf_dir, tmp_path):
    assert main(["export", "--format", "titans", str(hf_dir), str(tmp_path / "back")]) == 0
    ids = torch.tensor([list(SENTENCE.encode())])
    with torch.no_grad():
        before, after = ta.load_model(trained_dir)(ids)[0], ta.load_model(tmp_path / "back")(ids)[0]
    assert torch.equal(before, after)
    assert (tmp_path / "back" / "tokenizer_spec.json").is_file()


def test_cli_reports_a_bad_source(tmp_path, capsys):
    assert main(["export", "--format", "hf", str(tmp_path / "missing"), str(tmp_path / "o")]) == 1
    assert "checkpoint is missing" in capsys.readouterr().err


def test_a_model_without_its_tokenizer_spec_is_not_exported_as_bytes(tmp_path, capsys):
    """A 64-id model with no tokenizer_spec.json used to be exported with a made-up bytes
    tokenizer (issue 37); only a 256-id model is taken to be byte-level."""
    ta.create_model("lmm", preset="debug", vocab_size=64).save_pretrained(str(tmp_path / "m"))
    argv = ["export", "--format", "hf", str(tmp_path / "m"), str(tmp_path / "hf")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "tokenizer_spec.json" in err and "64 ids" in err
    assert not (tmp_path / "hf").exists()
