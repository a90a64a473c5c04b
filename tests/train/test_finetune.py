"""Fine-tuning: ``train.init_from`` starts a run from saved weights, and the
``babilong_style`` task trains on the prompts ``titans eval --task babilong-style`` scores."""

import pytest
import torch
from train_helpers import debug_config

from helpers import BABI_STORY, write_babi_and_books
from titans_atlas.eval.babilong import format_prompt
from titans_atlas.eval.metrics import babilong_labels
from titans_atlas.tokenizers import ByteTokenizer
from titans_atlas.train import Trainer, build_config, make_task
from titans_atlas.train.data.pipeline import build_pipeline

TEST_STORY = """1 Sandra journeyed to the kitchen.
2 Where is Sandra? \tkitchen\t1
"""


@pytest.fixture
def task_args(tmp_path):
    pytest.importorskip("nltk")  # the books are cut into sentences with Punkt
    babi, books = write_babi_and_books(tmp_path, train=BABI_STORY, test=TEST_STORY)
    return {"babi_dir": str(babi), "haystack_dir": str(books)}


def test_init_from_starts_from_the_saved_weights_with_a_fresh_optimiser(tmp_path):
    first = Trainer(debug_config(tmp_path / "a", train__steps=2))
    first.run()
    config = debug_config(tmp_path / "b", train__steps=2, train__init_from=str(tmp_path / "a"))
    second = Trainer(config)
    assert second.step == 0 and not second.optimizer.state
    for (name, ours), theirs in zip(
        second.model.state_dict().items(), first.model.state_dict().values()
    ):
        assert torch.equal(ours, theirs), name
    fresh = Trainer(debug_config(tmp_path / "c", train__steps=2))
    assert not all(
        torch.equal(a, b)
        for a, b in zip(fresh.model.state_dict().values(), first.model.state_dict().values())
    )


def test_init_from_refuses_another_model_its_own_run_dir_or_a_missing_checkpoint(tmp_path):
    Trainer(debug_config(tmp_path / "a", train__steps=1)).run()
    other = debug_config(tmp_path / "b", train__init_from=str(tmp_path / "a"), model__dim=48)
    with pytest.raises(ValueError, match=r"train.init_from=.*dim: saved 32, run 48"):
        Trainer(other)
    memory = debug_config(tmp_path / "b", train__init_from=str(tmp_path / "a"),
                          model__lr_max=0.5)  # fmt: skip
    with pytest.raises(ValueError, match=r"memory\.lr_max: saved 0\.1, run 0\.5\)$"):
        Trainer(memory)
    gates = debug_config(tmp_path / "b", train__init_from=str(tmp_path / "a"),
                         model__init_lr=0.001)  # fmt: skip
    Trainer(gates)  # init_* only set starting values, which the copied weights replace
    drawn = debug_config(tmp_path / "b", train__init_from=str(tmp_path / "a"),
                         model__output_init=1.0)  # fmt: skip
    Trainer(drawn)  # so does how the last weight was drawn (INIT_ONLY_FIELDS)
    floor = debug_config(tmp_path / "b", train__init_from=str(tmp_path / "a"),
                         model__decay_min=1e-4)  # fmt: skip
    lowered = Trainer(floor)  # a bound on the decay gate, not a weight: a fine-tune may move it
    assert lowered.model.config.memory.decay_min == 1e-4
    own = debug_config(tmp_path / "a", train__init_from=str(tmp_path / "a"))
    with pytest.raises(ValueError, match="would overwrite it"):
        Trainer(own)
    missing = debug_config(tmp_path / "c", train__init_from=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match=r"train\.init_from"):
        Trainer(missing)


def test_periodic_evaluation_and_checkpoints_can_be_turned_off(tmp_path):
    config = debug_config(tmp_path, train__steps=3, train__eval_every=0,
                          train__checkpoint_every=0)  # fmt: skip
    Trainer(config).run()
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == ["step_00000003"]
    for name in ("eval_every", "checkpoint_every", "eval_tokens", "sample_tokens"):
        with pytest.raises(ValueError, match=rf"train\.{name} must be >= 0"):
            debug_config(tmp_path, **{f"train__{name}": -1})


def test_babilong_style_rows_end_with_the_scored_answer_after_the_eval_prompt(task_args):
    task = make_task("babilong_style", 240, task_args)
    inputs, labels = task.sample(6, torch.Generator().manual_seed(0))
    assert inputs.shape == labels.shape == (6, 240) and task.vocab_size == 256
    tok = ByteTokenizer()
    for row, scored in zip(inputs.tolist(), labels):
        mask = scored >= 0
        answer = tok.decode(scored[mask].tolist())
        assert answer.strip() in babilong_labels("qa1") and answer.startswith(" ")
        assert mask[-len(answer) :].all() and mask.sum() == len(answer)  # only the answer
        text = tok.decode([*row, int(scored[-1])])
        question = text[text.index("Question: ") + 10 : text.index("\nAnswer:")]
        context = text[text.index("<context>\n") + 10 : text.index("\n</context>")]
        assert text.endswith(format_prompt(context, question)[-40:] + answer)
        assert "Sentence number" in context  # the facts sit among book sentences
    again, _ = task.sample(6, torch.Generator().manual_seed(0))
    assert torch.equal(inputs, again)


def test_babilong_style_task_runs_through_the_trainer_with_the_byte_tokenizer(task_args, tmp_path):
    overrides = {"data.source": "task:babilong_style", "data.task_args": task_args,
                 "train.seq_len": 96, "model.vocab_size": 256, "train.steps": 2,
                 "train.eval_tokens": 192, "train.out_dir": str(tmp_path / "run"),
                 "train.progress": False, "train.threads": 1}  # fmt: skip
    config = build_config("debug", overrides=overrides)
    pipeline = build_pipeline(config, 0, 1)
    assert isinstance(pipeline.tokenizer, ByteTokenizer)
    batches, _ = pipeline.make_val()
    asked = {pipeline.tokenizer.decode(row[row >= 0].tolist()) for row in batches.next().labels}
    assert asked == {" kitchen"}  # validation asks the held-out (test) question only
    result = Trainer(config).run()  # a smoke run: two steps, then the evaluation
    assert result.step == 2 and "val_accuracy" in result.eval


@pytest.mark.parametrize(
    ("args", "seq_len", "message"),
    [
        ({"babi_dir": ""}, 128, "babi_dir is required"),
        ({"task": "qa9"}, 128, "qa9"),
        ({}, 32, "seq_len must be >= 64"),
        ({"val_split": "train", "split": "test"}, 128, None),
        ({"task": "qa2"}, 128, "qa2_"),
        ({"haystack_dir": "/nonexistent"}, 128, r"holds no \*\.txt book files"),
    ],
)
def test_babilong_style_task_names_what_is_missing(task_args, args, seq_len, message):
    if message is None:  # both files exist: fine either way round
        make_task("babilong_style", seq_len, {**task_args, **args})
        return
    with pytest.raises(ValueError, match=message):
        make_task("babilong_style", seq_len, {**task_args, **args})


def test_babilong_style_rows_too_short_for_the_facts_keep_the_question_and_answer(task_args):
    inputs, labels = make_task("babilong_style", 64, task_args).sample(
        4, torch.Generator().manual_seed(3)
    )
    tok = ByteTokenizer()
    for row, scored in zip(inputs.tolist(), labels):
        text = tok.decode(row)
        assert inputs.shape == (4, 64) and "Question: Where is " in text
        assert tok.decode(scored[scored >= 0].tolist()).strip() in babilong_labels("qa1")


def test_babilong_style_validation_asks_the_held_out_questions(task_args):
    task = make_task("babilong_style", 240, task_args)
    held_out = task.validation()
    _, labels = held_out.sample(4, torch.Generator().manual_seed(0))
    tok = ByteTokenizer()
    assert {tok.decode(row[row >= 0].tolist()) for row in labels} == {" kitchen"}
    _, train_labels = task.sample(8, torch.Generator().manual_seed(0))
    assert " kitchen" not in {tok.decode(row[row >= 0].tolist()) for row in train_labels}
