"""Moved to ``titans_atlas.train.data.pipeline`` (train/ is split into config, data, loop,
checkpointing and distributed parts)."""

from .._compat import moved
from .data import pipeline as _new

moved(__name__, _new)
