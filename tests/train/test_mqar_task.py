"""The training task ``mqar``: Zoology's MQAR batches (``mqar_batch``) seeded from the run's
generator, held-out validation seeds, argument errors by name, and a short debug run."""

from __future__ import annotations

import math

import pytest
import torch
from train_helpers import debug_config

from titans_atlas.tasks import IGNORE, MQAR, TASKS, make_task, mqar_batch
from titans_atlas.train import train
from titans_atlas.train.data.batches import TaskBatches


def test_mqar_is_registered_and_draws_mqar_batch_from_the_generator():
    task = make_task("mqar", 64, {"num_pairs": 4, "vocab_size": 256})
    assert TASKS["mqar"] is MQAR and task.vocab_size == 256
    inputs, labels = task.sample(6, torch.Generator().manual_seed(5))
    draw = int(torch.randint(1 << 62, (1,), generator=torch.Generator().manual_seed(5)))
    expected = mqar_batch(6, 64, 4, 256, seed=2 * draw)  # training: the even seeds
    assert torch.equal(inputs, expected.input_ids) and torch.equal(labels, expected.labels)
    assert inputs.dtype == labels.dtype == torch.int64 and inputs.shape == (6, 64)


def test_mqar_batches_keep_zoologys_constraints():
    task = MQAR(seq_len=128, vocab_size=512, num_pairs=8, random_non_queries=False)
    inputs, labels = task.sample(16, torch.Generator().manual_seed(0))
    for ids, row in zip(inputs.tolist(), labels.tolist()):
        keys, values = ids[0:16:2], ids[1:16:2]
        assert all(1 <= k < 256 for k in keys) and all(256 <= v < 512 for v in values)
        assert len(set(keys)) == len(set(values)) == 8
        queries = [t for t, label in enumerate(row) if label != IGNORE]
        assert len(queries) == 8 and all(t >= 16 and t % 2 == 0 for t in queries)
        assert {ids[t]: row[t] for t in queries} == dict(zip(keys, values))
    noisy = MQAR(seq_len=128, vocab_size=512, num_pairs=8).sample(16, torch.Generator())
    assert int(noisy[0].min()) >= 0 and int(noisy[0].max()) < 512
    assert ((noisy[1] != IGNORE).sum(1) == 8).all()  # every pair asked once


def test_mqar_is_reproducible_and_validation_uses_other_seeds():
    task = MQAR(seq_len=64, vocab_size=256, num_pairs=4)
    one = task.sample(4, torch.Generator().manual_seed(1))
    two = task.sample(4, torch.Generator().manual_seed(1))
    assert all(torch.equal(a, b) for a, b in zip(one, two))
    held_out = task.validation()
    assert held_out.split == "validation" and held_out.seq_len == 64
    other = held_out.sample(4, torch.Generator().manual_seed(1))
    assert not torch.equal(one[0], other[0])
    draw = int(torch.randint(1 << 62, (1,), generator=torch.Generator().manual_seed(1)))
    assert torch.equal(other[0], mqar_batch(4, 64, 4, 256, seed=2 * draw + 1).input_ids)


def test_mqar_batches_resume_from_the_cursor():
    task = MQAR(seq_len=64, vocab_size=256, num_pairs=4)
    run = TaskBatches(task, 4, seed=3)
    for _ in range(3):
        run.next()
    resumed = TaskBatches(task, 4, seed=3)
    resumed.load_state_dict(run.state_dict())
    assert torch.equal(run.next().inputs, resumed.next().inputs)


@pytest.mark.parametrize(
    ("seq_len", "args", "named"),
    [
        (63, {}, "seq_len"),
        (64, {"vocab_size": 64}, "vocab_size"),
        (64, {"num_pairs": 17}, "num_pairs"),
        (64, {"num_pairs": 0}, "num_pairs"),
        (64, {"num_pairs": 2.5}, "num_pairs"),
        (64, {"power_a": 0}, "power_a"),
        (64, {"split": "test"}, "split"),
        (64, {"random_non_queries": "yes"}, "random_non_queries"),
        (64, {"num_kv_pairs": 4}, "num_kv_pairs"),  # zoology's name: not this task's
    ],
)
def test_mqar_names_the_bad_argument(seq_len, args, named):
    with pytest.raises(ValueError, match=named):
        make_task("mqar", seq_len, {"vocab_size": 256, **args})


def test_mqar_trains_through_the_loop(tmp_path):
    config = debug_config(
        tmp_path,
        **{
            "data__source": "task:mqar",
            "data__task_args.num_pairs": 4,
            "data__task_args.vocab_size": 256,
            "train__steps": 3,
            "train__eval_every": 0,
            "train__checkpoint_every": 0,
            "train__eval_tokens": 512,
        },
    )
    assert config.data.task_args == {"num_pairs": 4, "vocab_size": 256}
    result = train(config)
    assert result.step == 3 and all(math.isfinite(loss) for loss in result.losses.values())
    assert 0.0 <= result.eval["val_accuracy"] <= 1.0 and math.isfinite(result.eval["val_loss"])
