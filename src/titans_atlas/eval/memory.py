"""Moved to ``titans_atlas.memory_estimate.inference`` (one home for memory estimates)."""

from .._compat import moved
from ..memory_estimate import inference as _new

moved(__name__, _new)
