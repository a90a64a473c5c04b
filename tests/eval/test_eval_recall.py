"""Recall batches for training and evaluation: MQAR as zoology builds it, key-value recall at
an exact distance, prompt/answer label alignment -- and a window-limited induction head that
recalls within its window and falls to chance beyond it."""

import pytest
import torch
from eval_data import BOOKS, one_book
from eval_models import InductionCopyModel

from titans_atlas.eval import (
    EvalSettings,
    Evaluator,
    batch_accuracy,
    kv_recall_batch,
    mqar_batch,
    passkey_batch,
    prompt_answer_batch,
    run_task,
    sniah_batch,
    write_result,
)
from titans_atlas.eval.mqar import IGNORE
from titans_atlas.tokenizers import ByteTokenizer

TOK = ByteTokenizer()


def test_mqar_follows_zoologys_layout():
    batch = mqar_batch(8, 64, 4, 256, seed=3, random_non_queries=False)
    assert batch.input_ids.shape == batch.labels.shape == (8, 64)
    for ids, labels in zip(batch.input_ids.tolist(), batch.labels.tolist()):
        keys, values = ids[0:8:2], ids[1:8:2]
        assert all(1 <= k < 128 for k in keys) and all(128 <= v < 256 for v in values)
        assert len(set(keys)) == 4 and len(set(values)) == 4
        queries = [t for t, label in enumerate(labels) if label != IGNORE]
        assert len(queries) == 4 and all(t >= 8 and (t - 8) % 2 == 0 for t in queries)
        assert {ids[t]: labels[t] for t in queries} == dict(zip(keys, values))
        assert all(x == 0 for t, x in enumerate(ids[8:], 8) if t not in queries)


def test_mqar_is_seeded_and_checks_zoologys_constraints():
    one, two = mqar_batch(4, 64, 4, 256, seed=1), mqar_batch(4, 64, 4, 256, seed=1)
    assert torch.equal(one.input_ids, two.input_ids) and torch.equal(one.labels, two.labels)
    assert not torch.equal(one.input_ids, mqar_batch(4, 64, 4, 256, seed=2).input_ids)
    for bad in [dict(seq_len=63), dict(vocab_size=64), dict(num_kv_pairs=17)]:
        args = {"batch_size": 2, "seq_len": 64, "num_kv_pairs": 4, "vocab_size": 256, **bad}
        with pytest.raises(ValueError):
            mqar_batch(**args, seed=0)


def test_induction_head_solves_mqar_when_it_sees_the_context():
    clean = mqar_batch(16, 128, 8, 256, seed=0, random_non_queries=False)
    assert batch_accuracy(InductionCopyModel(256, window=128), clean) == 1.0
    assert batch_accuracy(InductionCopyModel(256, window=4), clean) == 0.0
    # zoology's random filler can repeat a key after its pair and mislead a naive copier
    noisy = mqar_batch(16, 128, 8, 256, seed=0)
    assert 0.8 < batch_accuracy(InductionCopyModel(256, window=128), noisy) < 1.0


@pytest.mark.parametrize("distance", [1, 5, 40, 100])
def test_kv_recall_puts_the_value_exactly_distance_back(distance):
    batch = kv_recall_batch(6, 120, distance, 64, seed=distance, num_pairs=3)
    for ids, labels in zip(batch.input_ids.tolist(), batch.labels.tolist()):
        query, value = ids[-1], labels[-1]
        assert all(label == IGNORE for label in labels[:-1]) and value >= 32
        assert ids[-1 - distance] == value and ids[-2 - distance] == query
        assert ids[:-1].count(query) == 1  # the key occurs once before its query
        assert sum(1 <= x < 32 for x in ids) == len(ids) - 3  # three values, the rest keys/noise


def test_induction_head_recalls_inside_its_window_and_not_beyond():
    window = 32
    model = InductionCopyModel(64, window=window)
    near = kv_recall_batch(64, 200, window - 3, 64, seed=0, num_pairs=4)
    far = kv_recall_batch(64, 200, 4 * window, 64, seed=0, num_pairs=4)
    assert batch_accuracy(model, near) == 1.0
    assert batch_accuracy(model, far) < 0.1  # chance is 1/32


def test_kv_recall_task_reports_accuracy_by_distance_in_windows(tmp_path):
    model = InductionCopyModel(64, window=16)
    settings = EvalSettings(distances=(4, 12, 64), samples=16, kv_pairs=2, extra={"vocab_size": 64})
    result = run_task(
        "kv-recall", model, TOK, settings, evaluator=Evaluator(model, check_budget=False)
    )
    summary = result["summary"]
    assert summary["distance_in_windows"] == [0.25, 0.75, 4.0]
    assert summary["accuracy"][:2] == [100.0, 100.0] and summary["accuracy"][2] < 20
    pytest.importorskip("matplotlib")
    assert write_result(result, tmp_path)[1].is_file()


def test_a_second_result_never_replaces_the_first(tmp_path):
    pytest.importorskip("matplotlib")  # write_result draws the plot beside the JSON
    model = InductionCopyModel(64, window=16)
    settings = EvalSettings(distances=(4,), samples=2, kv_pairs=2, extra={"vocab_size": 64})
    result = run_task(
        "kv-recall", model, TOK, settings, evaluator=Evaluator(model, check_budget=False)
    )
    first, _ = write_result(result, tmp_path)
    kept = first.read_text()
    second, _ = write_result({**result, "seconds": -1.0}, tmp_path)
    assert (first.name, second.name) == ("kv-recall.json", "kv-recall-2.json")
    assert first.read_text() == kept
    again, _ = write_result(result, tmp_path, overwrite=True)
    assert again == first


def test_mqar_task_scores_labelled_positions():
    model = InductionCopyModel(256, window=256)
    settings = EvalSettings(lengths=(64, 128), samples=4)
    result = run_task("mqar", model, TOK, settings, evaluator=Evaluator(model, check_budget=False))
    assert all(80 < a <= 100 for a in result["summary"]["accuracy"])
    assert result["samples"][0]["labelled"] == 4


def test_prompt_answer_labels_are_the_answer_tokens_shifted():
    batch = prompt_answer_batch(TOK, ["Q: two plus two?", "Q: a"], ["four", "b"], length=24)
    for row, answer in enumerate(["four", "b"]):
        ids, labels = batch.input_ids[row].tolist(), batch.labels[row].tolist()
        scored = [t for t, label in enumerate(labels) if label != IGNORE]
        assert TOK.decode([labels[t] for t in scored]) == " " + answer
        assert all(labels[t] == ids[t + 1] for t in scored[:-1])  # teacher forcing
        assert TOK.decode(ids[: scored[0] + 1]).endswith("?" if row == 0 else "a")
    with pytest.raises(ValueError, match="length"):
        prompt_answer_batch(TOK, ["x" * 30], ["y"], length=24)


def test_passkey_batch_labels_the_key_at_the_asked_distance():
    pytest.importorskip("wonderwords")  # not needed by passkey, but shares the module
    batch = passkey_batch(TOK, 600, 3, seed=0, distance=300)
    again = passkey_batch(TOK, 600, 3, seed=0, distance=300)
    assert batch.input_ids.shape == (3, 600) and torch.equal(batch.input_ids, again.input_ids)
    for ids, labels in zip(batch.input_ids.tolist(), batch.labels.tolist()):
        key = TOK.decode([x for x in labels if x != IGNORE]).strip()
        text = TOK.decode(ids)
        assert key.isdigit() and f"The pass key is {key}." in text
        question = text.index("What is the pass key?")
        assert question - text.index(f"The pass key is {key}.") < 300


def test_sniah_batch_is_seeded_and_labels_the_value():
    pytest.importorskip("wonderwords")
    batch = sniah_batch(TOK, "sniah-pk", 700, 2, seed=1, depth=0.5)
    assert torch.equal(
        batch.input_ids, sniah_batch(TOK, "sniah-pk", 700, 2, seed=1, depth=0.5).input_ids
    )
    for ids, labels in zip(batch.input_ids.tolist(), batch.labels.tolist()):
        value = TOK.decode([x for x in labels if x != IGNORE]).strip()
        assert f"is: {value}." in TOK.decode(ids)


@pytest.mark.skipif(not BOOKS.is_dir(), reason="shared/data/gutenberg is absent")
def test_sniah_batch_starts_each_book_haystack_somewhere_else(tmp_path):
    pytest.importorskip("wonderwords")
    pytest.importorskip("nltk")
    batch = sniah_batch(
        TOK, "sniah-n", 800, 2, seed=0, distance=400, haystack_dir=str(one_book(tmp_path))
    )
    first, second = (TOK.decode(row[150:300]) for row in batch.input_ids.tolist())
    assert first != second
