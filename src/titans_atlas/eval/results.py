"""Results on disk: one JSON file (task, label, settings, checkpoint with the sha256 of its
weights, summary, per-sample outcomes) and one PNG plot per run."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .loading import LoadedCheckpoint
from .registry import get_task


def checkpoint_record(loaded: LoadedCheckpoint) -> dict:
    """What a result says about the model it measured."""
    return {
        "path": str(loaded.model_dir),
        "name": f"{loaded.model.config.name} ({loaded.model_dir.name})",
        "sha256": loaded.sha256,
        "model": loaded.model.config.to_dict(),
        "parameters": loaded.model.num_parameters(),
        "tokenizer": loaded.tokenizer.name,
    }


def _json_ready(value):
    """NaN/inf -> None (JSON has neither); tuples -> lists; everything else as it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    return value


def write_result(
    result: dict, out_dir: str | Path, stem: str | None = None, *, overwrite: bool = False
) -> tuple[Path, Path]:
    """Write ``<stem>.json`` and ``<stem>.png`` (stem: the task name) into ``out_dir``.

    An earlier result is never replaced unless ``overwrite``: when either file exists the
    next free ``<stem>-2``, ``<stem>-3``, ... is taken (an evaluation can take hours, and
    one ``--out`` often collects several checkpoints' results). Returns the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = stem = stem or result["task"]
    number = 1
    while not overwrite and any((out_dir / f"{stem}{ext}").exists() for ext in (".json", ".png")):
        number += 1
        stem = f"{base}-{number}"
    json_path, png_path = out_dir / f"{stem}.json", out_dir / f"{stem}.png"
    json_path.write_text(json.dumps(_json_ready(result), indent=1, default=str) + "\n")
    get_task(result["task"]).plot(result, png_path)
    return json_path, png_path
