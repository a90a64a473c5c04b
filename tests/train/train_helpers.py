"""Shared pieces of the training tests: a debug run config in a temp directory."""

from __future__ import annotations

from pathlib import Path

from titans_atlas.train import RunConfig, build_config

QUIET = {"train.progress": False, "train.threads": 1}


def debug_config(out_dir: Path, **overrides) -> RunConfig:
    """The debug preset, quiet, writing into ``out_dir``; ``overrides`` use ``__`` for ``.``
    (``train__steps=4``)."""
    settings = {**QUIET, "train.out_dir": str(out_dir)}
    settings.update({key.replace("__", "."): value for key, value in overrides.items()})
    return build_config("debug", overrides=settings)
