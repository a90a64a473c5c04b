"""Moved to ``titans_atlas.io.run_dir`` (persistence lives in titans_atlas.io)."""

from .._compat import moved
from ..io import run_dir as _new

moved(__name__, _new)
