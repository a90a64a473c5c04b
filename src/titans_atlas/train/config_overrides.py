"""Moved to ``titans_atlas.train.config.overrides`` (train/ is split into config, data, loop,
checkpointing and distributed parts)."""

from .._compat import moved
from .config import overrides as _new

moved(__name__, _new)
