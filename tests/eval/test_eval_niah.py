"""S-NIAH and passkey: exact prompts, deterministic samples, the needle where they say, and a
window-limited copying model that solves them inside its window and fails beyond it."""

import random

import pytest
from eval_data import BOOKS, one_book
from eval_models import NeedleReaderModel

from titans_atlas.eval import EvalSettings, Evaluator, run_task, write_result
from titans_atlas.eval.niah import (
    ANSWER_PREFIX,
    NEEDLE,
    NOISE,
    PASSKEY_NEEDLE,
    build_niah_sample,
    build_passkey_sample,
)
from titans_atlas.tokenizers import ByteTokenizer

pytest.importorskip("wonderwords")
TOK = ByteTokenizer()


def needle_of(sample: dict) -> str:
    kind = {"sniah-pk": "number", "sniah-n": "number", "sniah-w": "word", "sniah-uuid": "uuid"}
    kind = kind[sample["variant"]]
    return NEEDLE.format(types=kind + "s", key=sample["key"], value=sample["answers"][0])


def test_prompt_is_rulers_template_word_for_word():
    sample = build_niah_sample(TOK, "sniah-pk", 700, random.Random(0), depth=0.5)
    prompt, key = sample["prompt"], sample["key"]
    assert prompt.startswith(
        "A special magic number is hidden within the following text. Make sure to memorize it. "
        "I will quiz you about the number afterwards.\n"
    )
    question = f"\nWhat is the special magic number for {key} mentioned in the provided text?"
    assert prompt.endswith(question + ANSWER_PREFIX.format(type="number", key=key))
    assert NOISE in prompt and sample["answers"][0] not in prompt.split(needle_of(sample))[1]
    assert len(sample["answers"][0]) == 7 and sample["answers"][0].isdigit()
    assert "-" in key  # adjective-noun


def test_samples_are_deterministic_given_the_seed():
    one = build_niah_sample(TOK, "sniah-pk", 600, random.Random("s"), depth=0.3)
    two = build_niah_sample(TOK, "sniah-pk", 600, random.Random("s"), depth=0.3)
    other = build_niah_sample(TOK, "sniah-pk", 600, random.Random("t"), depth=0.3)
    assert one == two and one["prompt"] != other["prompt"]


@pytest.mark.parametrize("depth", [0.0, 0.25, 0.5, 1.0])
def test_needle_sits_at_the_stated_depth_and_token(depth):
    sample = build_niah_sample(TOK, "sniah-pk", 2000, random.Random(1), depth=depth)
    assert sample["num_tokens"] <= 2000 and sample["num_tokens"] > 2000 - 100
    ids = TOK.encode(sample["prompt"])
    assert TOK.decode(ids[sample["needle_token"] :]).startswith(needle_of(sample))
    assert sample["needle_unit"] == int(depth * sample["haystack_units"])
    assert sample["distance"] == sample["num_tokens"] - sample["needle_token"]


def test_needle_at_a_distance_from_the_end():
    for distance in (300, 600, 1200):
        sample = build_niah_sample(TOK, "sniah-pk", 2000, random.Random(2), distance=distance)
        assert distance - len(NOISE) - 1 < sample["distance"] <= distance
        assert TOK.decode(TOK.encode(sample["prompt"])[sample["needle_token"] :]).startswith(
            needle_of(sample)
        )


def test_bad_placement_is_a_value_error():
    with pytest.raises(ValueError, match="exactly one"):
        build_niah_sample(TOK, "sniah-pk", 600, random.Random(0))
    with pytest.raises(ValueError, match="too short"):
        build_niah_sample(TOK, "sniah-pk", 100, random.Random(0), depth=0.5)
    with pytest.raises(ValueError, match="haystack_dir"):
        build_niah_sample(TOK, "sniah-n", 600, random.Random(0), depth=0.5)
    with pytest.raises(ValueError, match="variant"):
        build_niah_sample(TOK, "sniah-x", 600, random.Random(0), depth=0.5)


@pytest.mark.skipif(not BOOKS.is_dir(), reason="shared/data/gutenberg is absent")
@pytest.mark.parametrize("variant", ["sniah-n", "sniah-w", "sniah-uuid"])
def test_book_haystack_variants(variant, tmp_path):
    pytest.importorskip("nltk")
    books = str(one_book(tmp_path))
    sample = build_niah_sample(TOK, variant, 1500, random.Random(3), depth=0.5, haystack_dir=books)
    assert needle_of(sample) in sample["prompt"] and NOISE not in sample["prompt"]
    assert 1300 < sample["num_tokens"] <= 1500
    value = sample["answers"][0]
    assert {
        "sniah-n": value.isdigit(),
        "sniah-w": "-" in value,
        "sniah-uuid": value.count("-") == 4,
    }[variant]


def test_passkey_prompt_and_needle():
    sample = build_passkey_sample(TOK, 800, random.Random(0), depth=0.5)
    key = sample["answers"][0]
    assert sample["prompt"].endswith("\nWhat is the pass key? The pass key is")
    ids = TOK.encode(sample["prompt"])
    assert TOK.decode(ids[sample["needle_token"] :]).startswith(PASSKEY_NEEDLE.format(key=key))


def run_reader(window: int, lengths, depths) -> dict:
    model = NeedleReaderModel(window)
    settings = EvalSettings(lengths=lengths, depths=depths, samples=2)
    return run_task(
        "sniah-pk", model, TOK, settings, evaluator=Evaluator(model, check_budget=False)
    )


def test_copying_model_solves_sniah_within_its_window_and_fails_beyond():
    inside = run_reader(window=1200, lengths=(400, 1000), depths=(0.0, 0.5, 1.0))
    assert inside["summary"]["mean"] == 100.0
    assert all(o["distance"] < 1200 for o in inside["samples"])
    # a window of 300 tokens: needles further back are out of reach, nearer ones are found
    beyond = run_reader(window=300, lengths=(1000,), depths=(0.0, 1.0))
    accuracy = dict(zip(beyond["summary"]["depths"], beyond["summary"]["accuracy"]))
    assert accuracy[0.0] == [0.0] and accuracy[1.0] == [100.0]
    far = [o for o in beyond["samples"] if o["distance"] > 300]
    assert far and all(o["score"] == 0.0 for o in far)


def test_result_and_heatmap_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    result = run_reader(window=500, lengths=(400, 600), depths=(0.0, 1.0))
    json_path, png_path = write_result(result, tmp_path)
    assert json_path.is_file() and png_path.stat().st_size > 1000
    assert "prompt" not in json_path.read_text()  # outcomes keep no prompt text
