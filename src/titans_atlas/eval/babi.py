"""Moved to ``titans_atlas.tasks.babi`` (synthetic tasks live below train and eval)."""

from .._compat import moved
from ..tasks import babi as _new

moved(__name__, _new)
