"""``task:kv_persistent``: key-value recall whose pairs last a carried stream -- stored in a
stream's first sequence, asked again at the end of every later one."""

import pytest
import torch
from test_recall_run import TINY

from titans_atlas.train import Trainer, build_config, make_task
from titans_atlas.train.data.batches import IGNORE, TaskBatches

ARGS = {"vocab_size": 20, "num_pairs": 3}


def _answers(inputs: torch.Tensor, labels: torch.Tensor) -> dict[int, int]:
    """One row's scored queries as {key: value}."""
    at = (labels != IGNORE).nonzero().flatten()
    return {int(inputs[t]): int(labels[t]) for t in at}


def _stored(inputs: torch.Tensor, keys: set[int], tail: int) -> dict[int, int]:
    """The pairs a row stores before its query tail of ``tail`` tokens."""
    body = inputs[: inputs.shape[0] - tail].tolist()
    return {k: body[i + 1] for i, k in enumerate(body[:-1]) if k in keys}


def test_a_stream_asks_the_pairs_of_its_first_sequence_and_stores_them_only_there():
    windows, rows, steps = 3, 4, 9
    batches = TaskBatches(make_task("kv_persistent", 40, ARGS), rows, seed=5,
                          stream_windows=windows)  # fmt: skip
    first_facts: dict[int, dict[int, int]] = {}
    every_stream = []  # the pairs of each stream, in the order they start
    for step in range(steps):
        batch = batches.next()
        for row in range(rows):
            inputs, labels = batch.inputs[row], batch.labels[row]
            answers = _answers(inputs, labels)
            assert len(answers) == 3 and labels[-1] != IGNORE
            stored = _stored(inputs, set(answers), tail=5)
            age = min((step + row) % windows, step)  # streams under way at batch 0 start there
            values_shown = int((inputs >= 10).sum())  # value ids lie in [V/2, V)
            if age == 0:
                assert stored == answers  # every asked key stood earlier with its value
                assert values_shown == 3  # and nowhere else: the answers are not shown
                first_facts[row] = answers
                every_stream.append(tuple(sorted(answers.items())))
            else:
                assert stored == {} and values_shown == 0  # noise and unanswered queries
                assert answers == first_facts[row]  # the same pairs, still true
            assert bool(batch.reset[row]) == ((step + row) % windows == 0)
    starts = rows + sum(
        (step + row) % windows == 0 for step in range(1, steps) for row in range(rows)
    )
    assert len(every_stream) == starts == 14  # all rows at batch 0, then every W-th batch
    assert len(set(every_stream)) == len(every_stream)  # a new stream, new pairs


def test_streams_differ_and_outside_stream_mode_every_row_stores_its_pairs():
    task = make_task("kv_persistent", 40, ARGS)
    inputs, labels = task.sample(64, torch.Generator().manual_seed(0))
    for row in range(64):
        answers = _answers(inputs[row], labels[row])
        assert _stored(inputs[row], set(answers), tail=5) == answers
    assert len({tuple(sorted(_answers(i, l).items())) for i, l in zip(inputs, labels)}) > 32
    again = task.sample(64, torch.Generator().manual_seed(0))
    assert torch.equal(inputs, again[0]) and torch.equal(labels, again[1])


def test_the_global_batch_is_the_same_for_every_world_size_and_after_a_resume():
    task = make_task("kv_persistent", 40, ARGS)
    whole = TaskBatches(task, 4, seed=1, stream_windows=3)
    halves = [TaskBatches(task, 2, seed=1, rank=r, world_size=2, stream_windows=3) for r in (0, 1)]
    for _ in range(5):
        batch = whole.next()
        parts = [half.next() for half in halves]
        assert torch.equal(batch.inputs, torch.cat([p.inputs for p in parts]))
    resumed = TaskBatches(task, 4, seed=1, stream_windows=3)
    resumed.load_state_dict(whole.state_dict())
    assert torch.equal(resumed.next().labels, whole.next().labels)


@pytest.mark.parametrize(
    "args, word",
    [({"layout": "interleaved"}, "layout"), ({"num_queries": 4}, "num_queries"),
     ({"num_pairs": 30}, "num_pairs")],
)  # fmt: skip
def test_bad_arguments_are_named(args, word):
    with pytest.raises(ValueError, match=word):
        make_task("kv_persistent", 40, {**ARGS, **args})


def test_sample_stream_checks_its_rows():
    task = make_task("kv_persistent", 40, ARGS)
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="ages"):
        task.sample_stream(torch.zeros(3, dtype=torch.long), torch.zeros(2, dtype=torch.long),
                           generator)  # fmt: skip
    with pytest.raises(ValueError, match="ages"):
        task.sample_stream(-torch.ones(2, dtype=torch.long), torch.zeros(2, dtype=torch.long),
                           generator)  # fmt: skip


def test_a_model_trains_on_it_in_stream_mode(tmp_path):
    overrides = [*TINY, "data.source=task:kv_persistent", "data.mode=stream",
                 "data.stream_tokens=96", "train.steps=4", f"train.out_dir={tmp_path}"]  # fmt: skip
    losses = Trainer(build_config("recall", overrides=overrides)).run().losses
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(list(losses.values()))))


def test_new_pairs_are_stored_and_asked_in_their_own_sequence_beside_the_streams():
    task = make_task("kv_persistent", 40, {**ARGS, "new_pairs": 2})
    ages, seeds = torch.arange(4), torch.full((4,), 123)  # one stream's first four sequences
    inputs, labels = task.sample_stream(ages, seeds, torch.Generator().manual_seed(0))
    answers = [_answers(i, l) for i, l in zip(inputs, labels)]
    facts = dict(set(answers[1].items()) & set(answers[2].items()) & set(answers[3].items()))
    assert len(facts) == 3 and all(len(a) == 5 for a in answers)
    assert facts.items() <= answers[0].items()  # the stream's pairs, the same every time
    for age in range(4):
        body = inputs[age, : 40 - 9]  # before the 9-token query tail
        stored = _stored(inputs[age], set(answers[age]), tail=9)
        new = {k: v for k, v in answers[age].items() if k not in facts}
        assert stored == (answers[age] if age == 0 else new) and len(new) == 2
        assert int((body >= 10).sum()) == len(stored)  # values only after stored keys
        if age:  # the stream's keys stand nowhere but in the queries
            assert not any(int((body == key).sum()) for key in facts)
    news = [frozenset(a.items() - facts.items()) for a in answers]
    assert len(set(news)) > 1  # each sequence draws its own new pairs
    said = [pair for a in answers for pair in a.items()]
    # 8 new pairs from 6 free key ids: keys come back, and always with the stream's value
    assert len(dict(said)) == len(set(said)) < 3 + 2 * 4


def test_new_pairs_must_leave_a_noise_id():
    make_task("kv_persistent", 40, {**ARGS, "new_pairs": 5})  # 3 + 5 of 9 key ids
    with pytest.raises(ValueError, match="new_pairs"):
        make_task("kv_persistent", 40, {**ARGS, "new_pairs": 6})
    with pytest.raises(ValueError, match="new_pairs"):
        make_task("kv_persistent", 40, {**ARGS, "new_pairs": -1})
