"""Moved to ``titans_atlas.tasks.persistent`` (synthetic tasks live below train and eval)."""

from .._compat import moved
from ..tasks import persistent as _new

moved(__name__, _new)
