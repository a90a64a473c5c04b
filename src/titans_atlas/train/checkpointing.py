"""The training side of checkpoints: what needs the run's config (``RunConfig``) on top of
the formats in ``titans_atlas.io`` (single-process and sharded training checkpoints)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..io.sharded import MODEL_DIR, SHARDS, write_consolidated
from ..io.training import STATE_FILE, find_checkpoint, verify_checkpoint
from ..layers.memory_config import INIT_ONLY_BEFORE
from ..models.atlas import PRESET_MEMORY_BEFORE
from ..models.config import ModelConfig
from ..models.pretrained import CONFIG_FILE, CheckpointError, config_from_meta, read_config
from ..models.registry import build_model
from ..validation import check_writable_dir
from .config import RunConfig


def consolidate(checkpoint: str | Path, out_dir: str | Path | None = None) -> Path:
    """Write the model directory (``config.json`` + one ``model.safetensors``, what
    ``load_model`` reads) of a sharded checkpoint, in one process; returns it. Default
    ``out_dir``: the checkpoint's own ``model/``."""
    directory = find_checkpoint(checkpoint)
    out = Path(out_dir) if out_dir is not None else directory / MODEL_DIR
    check_writable_dir("--out", out)
    state = verify_checkpoint(directory)
    if not (directory / SHARDS).is_dir():
        raise CheckpointError(f"{directory} is not a sharded checkpoint (no {SHARDS}/)")
    return write_consolidated(build_model(saved_model_config(directory, state)), directory, out)


def saved_model_config(directory: Path, state: dict) -> ModelConfig:
    """The model config a checkpoint's weights were drawn and trained with: its state file's
    own (``model``, written since 2026-12-08), else its exported ``model/config.json``, else
    the run's settings rebuilt -- with the fields whose default has moved since at their
    earlier value where the settings did not choose them (``INIT_ONLY_BEFORE``: ``output_init``
    was 1 before 2026-12-07; ``PRESET_MEMORY_BEFORE``: ``omeganet``'s inner step before
    2026-12-08), since such a checkpoint predates every one of those changes."""
    where = directory / STATE_FILE
    if "model" in state:
        return config_from_meta(state["model"], where)
    if (directory / MODEL_DIR / CONFIG_FILE).is_file():
        return read_config(directory / MODEL_DIR / CONFIG_FILE)
    try:
        model = RunConfig.from_dict(state["config"]).model
        config = model.build()
    except ValueError as err:
        raise CheckpointError(f"{where} holds a bad config: {err}") from err
    # overrides name memory fields without their "memory." prefix (``set_value`` strips it)
    earlier = {**INIT_ONLY_BEFORE, **PRESET_MEMORY_BEFORE.get(config.name, {})}
    before = {k: v for k, v in earlier.items() if k not in model.overrides}
    return replace(config, memory=replace(config.memory, **before))
