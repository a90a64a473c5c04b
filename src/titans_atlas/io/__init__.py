"""Persistence: every file format of the library, one vocabulary.

* a **model directory** -- ``config.json`` + ``model.safetensors``: ``save_model`` /
  ``load_model`` (= ``LanguageModel.save_pretrained`` / ``from_pretrained``). Its reader and
  writer live beside the model (``models/pretrained.py``), because the model's own
  ``save_pretrained`` / ``from_pretrained`` use them and ``models`` sits below ``io``.
* a **stream state** -- one safetensors file, structure as JSON, classes from a fixed
  registry (``state``): ``save_state`` / ``load_state``.
* a **training checkpoint** -- ``run_dir/checkpoints/step_N/`` with a manifest, pointers
  ``latest.json`` / ``best.json`` confined to ``checkpoints/`` (``training``), sharded
  across ranks with DCP's safetensors storage (``sharded``).
* a **run directory** -- what a run writes, its lock, and clearing it (``run_dir``).

No pickle anywhere. ``CheckpointError`` names what is wrong with any of them.
"""

from __future__ import annotations

from ..models.pretrained import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    load_model,
    read_config,
    save_model,
)
from .run_dir import RunLock, lock_run_dir
from .sharded import load_training_state, save_sharded
from .state import load_state, save_state, state_classes
from .training import (
    CheckpointWriteError,
    find_checkpoint,
    load_checkpoint,
    resolve_model_dir,
    save_checkpoint,
    verify_checkpoint,
)

__all__ = [
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "CheckpointError",
    "CheckpointWriteError",
    "RunLock",
    "find_checkpoint",
    "load_checkpoint",
    "load_model",
    "load_state",
    "load_training_state",
    "lock_run_dir",
    "read_config",
    "resolve_model_dir",
    "save_checkpoint",
    "save_model",
    "save_sharded",
    "save_state",
    "state_classes",
    "verify_checkpoint",
]
