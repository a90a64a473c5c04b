"""The training side of checkpoints: what needs the run's config (``RunConfig``) on top of
the formats in ``titans_atlas.io`` (single-process and sharded training checkpoints)."""

from __future__ import annotations

from pathlib import Path

from ..io.sharded import MODEL_DIR, SHARDS, write_consolidated
from ..io.training import STATE_FILE, find_checkpoint, verify_checkpoint
from ..models.pretrained import CheckpointError
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
    try:
        model = build_model(RunConfig.from_dict(state["config"]).model.build())
    except ValueError as err:
        raise CheckpointError(f"{directory / STATE_FILE} holds a bad config: {err}") from err
    return write_consolidated(model, directory, out)
