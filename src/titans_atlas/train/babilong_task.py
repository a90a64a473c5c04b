"""Moved to ``titans_atlas.tasks.babilong`` (synthetic tasks live below train and eval)."""

from .._compat import moved
from ..tasks import babilong as _new

moved(__name__, _new)
