"""Moved to ``titans_atlas.tasks.haystack`` (synthetic tasks live below train and eval)."""

from .._compat import moved
from ..tasks import haystack as _new

moved(__name__, _new)
