"""Training: config dataclasses with presets, data sources and batchers (packed and
long-stream), AdamW with parameter groups, the loop, and exact-resume checkpoints.

    from titans_atlas.train import build_config, train
    result = train(build_config("debug", overrides=["train.steps=20"]))

The ``titans train`` / ``titans prepare`` / ``titans consolidate`` commands (``cli/train.py``)
drive the same functions; under ``torchrun`` every rank runs them (``distributed.py``).
Nothing here imports an extra at ``import titans_atlas`` time.
"""

from ..io.training import find_checkpoint, load_checkpoint, resolve_model_dir, save_checkpoint
from ..models.rows import replace_rows, reset_rows
from ..tasks import IGNORE, TASKS, make_task
from .checkpointing import consolidate
from .config import DataConfig, ModelSpec, OptimConfig, RunConfig, TrainConfig, build_config
from .config.presets import RUN_PRESETS
from .data import Corpus, load_corpus
from .data.batches import Batch, PackedBatches, StreamBatches
from .distributed import Parallel, setup_parallel
from .loop import NonFiniteError, Trainer, TrainResult, train

__all__ = [
    "IGNORE",
    "RUN_PRESETS",
    "TASKS",
    "Batch",
    "Corpus",
    "DataConfig",
    "ModelSpec",
    "NonFiniteError",
    "OptimConfig",
    "PackedBatches",
    "Parallel",
    "RunConfig",
    "StreamBatches",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "build_config",
    "consolidate",
    "find_checkpoint",
    "load_checkpoint",
    "load_corpus",
    "make_task",
    "replace_rows",
    "reset_rows",
    "resolve_model_dir",
    "save_checkpoint",
    "setup_parallel",
    "train",
]
