"""Every module that moved still imports from its old path, with a DeprecationWarning that
names the new one, and is the new module (same objects, same ``mock.patch`` targets)."""

from __future__ import annotations

import importlib
import sys

import pytest

MOVED = {
    "titans_atlas.bpe": "titans_atlas.tokenizers.bpe",
    "titans_atlas.checkpoint": "titans_atlas.models.pretrained",
    "titans_atlas.eval.babi": "titans_atlas.tasks.babi",
    "titans_atlas.eval.command": "titans_atlas.cli.eval",
    "titans_atlas.eval.haystack": "titans_atlas.tasks.haystack",
    "titans_atlas.eval.memory": "titans_atlas.memory_estimate.inference",
    "titans_atlas.generate": "titans_atlas.generation",
    "titans_atlas.generate_cli": "titans_atlas.cli.generate",
    "titans_atlas.integrations.export": "titans_atlas.cli.export",
    "titans_atlas.state_io": "titans_atlas.io.state",
    "titans_atlas.tokenizer": "titans_atlas.tokenizers",
    "titans_atlas.train.babilong_task": "titans_atlas.tasks.babilong",
    "titans_atlas.train.batches": "titans_atlas.train.data.batches",
    "titans_atlas.train.checkpoint": "titans_atlas.io.training",
    "titans_atlas.train.cli": "titans_atlas.cli.train",
    "titans_atlas.train.config_overrides": "titans_atlas.train.config.overrides",
    "titans_atlas.train.memory_estimate": "titans_atlas.memory_estimate.training",
    "titans_atlas.train.persistent_recall": "titans_atlas.tasks.persistent",
    "titans_atlas.train.pipeline": "titans_atlas.train.data.pipeline",
    "titans_atlas.train.prepare": "titans_atlas.train.data.prepare",
    "titans_atlas.train.presets": "titans_atlas.train.config.presets",
    "titans_atlas.train.recall_report": "titans_atlas.cli.recall_report",
    "titans_atlas.train.run_dir": "titans_atlas.io.run_dir",
    "titans_atlas.train.stream": "titans_atlas.models.rows",
    "titans_atlas.train.tasks": "titans_atlas.tasks",
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_and_is_the_new_module(old):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=MOVED[old].replace(".", r"\.")):
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])


def test_the_sharded_checkpoint_path_keeps_its_names():
    sys.modules.pop("titans_atlas.train.dist_checkpoint", None)
    with pytest.warns(DeprecationWarning, match="titans_atlas.io.sharded"):
        from titans_atlas.train.dist_checkpoint import consolidate, save_sharded
    from titans_atlas.io.sharded import save_sharded as new_save
    from titans_atlas.train.checkpointing import consolidate as new_consolidate

    assert (consolidate, save_sharded) == (new_consolidate, new_save)


def test_moved_names_still_import_from_the_packages():
    from titans_atlas import io, tasks
    from titans_atlas.eval import kv_recall_batch, mqar_batch, passkey_batch
    from titans_atlas.eval.metrics import babilong_labels
    from titans_atlas.eval.recall import sniah_batch
    from titans_atlas.models.backbone import MODELS, build_model, create_model
    from titans_atlas.train import IGNORE, TASKS, consolidate, find_checkpoint, make_task

    assert kv_recall_batch is tasks.kv_recall_batch and mqar_batch is tasks.mqar_batch
    assert passkey_batch is tasks.passkey_batch and sniah_batch is tasks.sniah_batch
    assert babilong_labels is tasks.babilong_labels and TASKS is tasks.TASKS
    assert make_task is tasks.make_task and IGNORE == tasks.IGNORE == -100
    assert find_checkpoint is io.find_checkpoint and callable(consolidate)
    assert "mac" in MODELS and callable(build_model) and callable(create_model)
