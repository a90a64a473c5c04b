"""A run's configuration: the dataclasses (``run.py``: RunConfig with its model / data /
optim / train sections), the named presets (``presets.py``) and the overrides that change
them -- ``section.field=value`` and config files, each key checked (``overrides.py``)."""

from __future__ import annotations

from .overrides import apply_nested, read_config_file, set_value, suggest
from .presets import RUN_PRESETS
from .run import (
    RESUMABLE,
    STRATEGIES,
    DataConfig,
    ModelSpec,
    OptimConfig,
    RunConfig,
    TrainConfig,
    build_config,
    config_differences,
    is_dataclass_instance,
    resume_differences,
)

__all__ = [
    "RESUMABLE",
    "RUN_PRESETS",
    "STRATEGIES",
    "DataConfig",
    "ModelSpec",
    "OptimConfig",
    "RunConfig",
    "TrainConfig",
    "apply_nested",
    "build_config",
    "config_differences",
    "is_dataclass_instance",
    "read_config_file",
    "resume_differences",
    "set_value",
    "suggest",
]
