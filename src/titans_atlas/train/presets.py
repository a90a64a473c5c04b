"""Moved to ``titans_atlas.train.config.presets`` (train/ is split into config, data, loop,
checkpointing and distributed parts)."""

from .._compat import moved
from .config import presets as _new

moved(__name__, _new)
