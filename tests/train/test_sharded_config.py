"""A sharded checkpoint names the model config its weights were drawn with: the state file
holds it (``model``), so `titans consolidate` and a resume label the model as it was built,
not with today's defaults. One written before it held one (before 2026-12-08) was drawn
with the init-only values of its day (``INIT_ONLY_BEFORE``: ``output_init`` 1)."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from titans_atlas.io import load_model
from titans_atlas.layers.memory_config import INIT_ONLY_BEFORE
from titans_atlas.train import Trainer, build_config
from titans_atlas.train.checkpointing import consolidate

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch built without torch.distributed"
)


def run_config(out: Path, **extra):
    settings = {
        "train.strategy": "ddp", "train.export_model": False, "train.steps": 1,
        "train.batch_size": 2, "train.seq_len": 32, "train.eval_tokens": 256,
        "train.sample_tokens": 0, "train.threads": 1, "train.progress": False,
        "train.out_dir": str(out), **extra,
    }  # fmt: skip
    return build_config("debug", overrides=settings)


def checkpoint_of(run: Path) -> Path:
    return next((run / "checkpoints").glob("step_*"))


def rewrite_state(step: Path, change) -> None:
    """Edit the state file as an older writer left it, with a manifest that matches."""
    state = json.loads((step / "trainer_state.json").read_text())
    change(state)
    (step / "trainer_state.json").write_text(json.dumps(state))
    manifest = json.loads((step / "manifest.json").read_text())
    data = (step / "trainer_state.json").read_bytes()
    manifest["trainer_state.json"] = {
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    (step / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sharded") / "run"
    Trainer(run_config(out)).run()
    return out


def test_the_state_file_names_the_model_and_consolidate_keeps_it(run, tmp_path):
    step = checkpoint_of(run)
    state = json.loads((step / "trainer_state.json").read_text())
    assert state["model"]["config"]["memory"]["output_init"] == 0.5  # today's default
    model = load_model(consolidate(step, tmp_path / "model"))
    assert model.config.to_dict() == state["model"]["config"]


def test_a_checkpoint_from_before_is_labelled_with_the_scale_it_was_drawn_at(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    step, old = checkpoint_of(run), checkpoint_of(copy)
    rewrite_state(old, lambda state: state.pop("model"))
    model = load_model(consolidate(old, tmp_path / "model"))
    assert model.config.memory.output_init == INIT_ONLY_BEFORE["output_init"] == 1.0
    # a resumed run takes the saved label back, so its next checkpoint says the same
    trainer = Trainer(run_config(copy, **{"train.steps": 2}), resume=True)
    assert trainer.model.config.memory.output_init == 1.0
    # a value the run's settings chose is what the weights were drawn with
    chosen = tmp_path / "chosen"
    shutil.copytree(step, chosen)

    def set_scale(state):
        state.pop("model")
        state["config"]["model"]["overrides"]["output_init"] = 0.25

    rewrite_state(chosen, set_scale)
    model = load_model(consolidate(chosen, tmp_path / "model-chosen"))
    assert model.config.memory.output_init == 0.25


def test_a_state_file_with_a_bad_model_entry_is_refused_by_name(run, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(checkpoint_of(run), bad)
    rewrite_state(bad, lambda state: state.update(model={"format": "other"}))
    with pytest.raises(ValueError, match=r"trainer_state\.json is not a titans-atlas config"):
        consolidate(bad, tmp_path / "model")


def test_a_checkpoint_without_a_model_config_resumes_at_the_preset_of_its_day(
    tmp_path, monkeypatch, capsys
):
    """Written before the state file held a model (and without model/), a checkpoint also
    predates every preset move of ``PRESET_MEMORY_BEFORE``: an ``omeganet`` run resumes at the
    inner step it trained with, not today's, and says so."""
    from titans_atlas.models import registry
    from titans_atlas.models.atlas import PRESET_MEMORY_BEFORE

    out = tmp_path / "run"
    cls, defaults = registry.MODELS["omeganet"]
    earlier = {**defaults, "memory": {**defaults["memory"], **PRESET_MEMORY_BEFORE["omeganet"]}}
    settings = {"model.name": "omeganet", "model.chunk_size": 16}
    monkeypatch.setitem(registry.MODELS, "omeganet", (cls, earlier))
    Trainer(run_config(out, **settings)).run()
    rewrite_state(checkpoint_of(out), lambda state: state.pop("model"))
    monkeypatch.setitem(registry.MODELS, "omeganet", (cls, defaults))  # today's preset
    trainer = Trainer(run_config(out, **settings, **{"train.steps": 2}), resume=True)
    memory = trainer.model.config.memory
    assert (memory.init_lr, memory.lr_max) == (0.02, 0.1)
    assert "memory.lr_max" in capsys.readouterr().err
