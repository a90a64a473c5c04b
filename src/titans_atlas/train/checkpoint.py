"""Moved to ``titans_atlas.io.training`` (persistence lives in titans_atlas.io)."""

from .._compat import moved
from ..io import training as _new

moved(__name__, _new)
