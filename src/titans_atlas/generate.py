"""Moved to ``titans_atlas.generation`` (prefill / decode / generate and sampling)."""

from . import generation as _new
from ._compat import moved

moved(__name__, _new)
