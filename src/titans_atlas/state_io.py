"""Moved to ``titans_atlas.io.state`` (persistence lives in titans_atlas.io)."""

from ._compat import moved
from .io import state as _new

moved(__name__, _new)
