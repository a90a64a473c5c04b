"""Moved to ``titans_atlas.tasks`` (synthetic tasks live below train and eval)."""

from .. import tasks as _new
from .._compat import moved

moved(__name__, _new)
