"""BABILong: bAbI parsing, the offline BABILong-style builder (noise insertion as the
benchmark does it), the Hugging Face loader on a local dataset in BABILong's schema, and the
task run end to end with honest scoring."""

import json
import random

import pytest
from eval_data import BABI, BOOKS, one_book

from helpers import BABI_STORY, write_babi_qa1
from titans_atlas import create_model
from titans_atlas.eval import EvalSettings, run_task
from titans_atlas.eval.babilong import answer, format_prompt, load_babilong
from titans_atlas.tasks.babi import STYLE_LABEL, babi_file, build_style_sample, parse_babi
from titans_atlas.tokenizers import ByteTokenizer

TOK = ByteTokenizer()
NOISE = tuple(f"Sentence number {i} of the long and winding book text." for i in range(200))


@pytest.fixture
def babi_dir(tmp_path):
    return write_babi_qa1(tmp_path, test=BABI_STORY)


def test_parse_babi_makes_one_sample_per_question_without_earlier_questions(babi_dir):
    samples = parse_babi(babi_file(babi_dir, "qa1"))
    assert len(samples) == 3
    assert samples[1].facts == (
        "Mary moved to the bathroom.",
        "John went to the hallway.",
        "Daniel went back to the hallway.",
        "Sandra moved to the garden.",
    )
    assert samples[1].question == "Where is Daniel?" and samples[1].answer == "hallway"
    assert samples[1].facts[samples[1].supporting[0]] == "Daniel went back to the hallway."
    assert samples[2].facts == ("John travelled to the office.",)  # a new story


def test_missing_babi_file_names_what_to_get(tmp_path):
    with pytest.raises(ValueError, match="bAbI"):
        babi_file(tmp_path, "qa2")


def test_length_zero_is_the_facts_alone(babi_dir):
    item = parse_babi(babi_file(babi_dir, "qa1"))[1]
    sample = build_style_sample(item, TOK, 0, NOISE, random.Random(0))
    assert sample["context"] == " ".join(item.facts)


def test_facts_keep_their_order_in_sorted_random_gaps_and_fill_the_budget(babi_dir):
    item = parse_babi(babi_file(babi_dir, "qa1"))[1]
    sample = build_style_sample(item, TOK, 2048, NOISE, random.Random(5))
    context = sample["context"]
    assert sample["context_tokens"] == 2048 - 300  # exactly the budget
    assert sample["fact_positions"] == sorted(sample["fact_positions"])
    offsets = [context.index(f) for f in item.facts]
    assert offsets == sorted(offsets)
    ids = TOK.encode(" " + context)
    for fact, at in zip(item.facts, sample["fact_tokens"]):
        assert TOK.decode(ids[at:]).startswith(" " + fact)
    assert item.question not in context and sample["target"] == "hallway"
    again = build_style_sample(item, TOK, 2048, NOISE, random.Random(5))
    assert again == sample


def test_sentences_under_ten_tokens_are_dropped(babi_dir):
    item = parse_babi(babi_file(babi_dir, "qa1"))[0]
    noise = ("Short one.", "This sentence is certainly long enough to be kept.")
    sample = build_style_sample(item, TOK, 400, noise, random.Random(0))
    assert "Short one" not in sample["context"] and "long enough" in sample["context"]


@pytest.mark.skipif(not (BABI.is_dir() and BOOKS.is_dir()), reason="shared/data is absent")
def test_babilong_style_task_on_real_bAbI_and_books(tmp_path):
    pytest.importorskip("nltk")
    model = create_model("swa", preset="debug").eval()
    settings = EvalSettings(
        lengths=(0, 1024),
        samples=2,
        babi_dir=str(BABI),
        haystack_dir=str(one_book(tmp_path)),
        babi_tasks=("qa1", "qa5"),
    )
    result = run_task("babilong-style", model, TOK, settings)
    assert result["label"] == STYLE_LABEL == "BABILong-style (bAbI + Gutenberg noise)"
    assert all(o["source"] == STYLE_LABEL for o in result["samples"])
    assert {o["score"] for o in result["samples"]} <= {0.0, 1.0}
    assert result["summary"]["tasks"] == ["qa1", "qa5"] and len(result["samples"]) == 8
    first = parse_babi(babi_file(BABI, "qa1"))[0]  # the test questions, in order
    assert result["samples"][0]["question"] == first.question


class FixedScores:
    """Stands in for a model: gives each candidate label a set log-likelihood."""

    def __init__(self, scores):
        self.scores = scores

    def rank_candidates(self, prompt_ids, candidates):
        return [self.scores.get(TOK.decode(c).strip(), -10.0) for c in candidates]


def test_likelihood_scoring_picks_the_most_likely_label_and_the_metric_judges_it():
    from titans_atlas.eval.metrics import babilong_compare_answers, babilong_labels

    settings = EvalSettings(scoring="likelihood")
    prompt = format_prompt("Mary went to the kitchen.", "Where is Mary?")
    output, details = answer(FixedScores({"kitchen": -1.0}), TOK, prompt, "qa1", settings)
    assert output == "kitchen" and set(details["label_logprobs"]) == set(babilong_labels("qa1"))
    assert babilong_compare_answers("kitchen", output, "Where is Mary?", babilong_labels("qa1"))
    # the same confident answer to a question that names it scores 0
    question = "Where was the apple before the kitchen?"
    assert not babilong_compare_answers("kitchen", output, question, babilong_labels("qa1"))


def write_local_babilong(root, rows_by_config):
    """A local dataset in RMT-team/babilong's layout: one config per length, one split per task."""
    lines = ["---", "configs:"]
    for config, splits in rows_by_config.items():
        lines += [f"- config_name: {config}", "  data_files:"]
        for split, rows in splits.items():
            path = root / config / f"{split}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            lines += [f"  - split: {split}", f"    path: {config}/{split}.jsonl"]
    (root / "README.md").write_text("\n".join([*lines, "---", ""]))


ROWS = [
    {
        "input": "Mary moved to the bathroom. John went to the hallway.",
        "question": "Where is Mary?",
        "target": "bathroom",
    },
    {"input": "Daniel went to the office.", "question": "Where is Daniel?", "target": "office"},
]


def test_hub_loader_reads_a_local_copy_in_babilong_schema(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    write_local_babilong(tmp_path, {"0k": {"qa1": ROWS}, "1k": {"qa1": ROWS[:1]}})
    rows = load_babilong(str(tmp_path), 0, "qa1")
    assert rows == ROWS
    assert load_babilong(str(tmp_path), "1k", "qa1") == ROWS[:1]
    with pytest.raises(ValueError, match="RMT-team/babilong"):
        load_babilong(str(tmp_path), 0, "qa2")
    model = create_model("swa", preset="debug").eval()
    settings = EvalSettings(
        lengths=(0, 1024), samples=2, dataset=str(tmp_path), babi_tasks=("qa1",)
    )
    result = run_task("babilong", model, TOK, settings)
    assert [o["target"] for o in result["samples"]] == ["bathroom", "office", "bathroom"]
    assert all(
        o["output"] in {"bathroom", "bedroom", "garden", "hallway", "kitchen", "office"}
        for o in result["samples"]
    )
    greedy = run_task(
        "babilong",
        model,
        TOK,
        EvalSettings(**{**settings.__dict__, "scoring": "greedy", "max_new_tokens": 4}),
    )
    assert all(len(TOK.encode(o["output"])) <= 4 for o in greedy["samples"])
