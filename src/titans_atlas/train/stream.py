"""Moved to ``titans_atlas.models.rows`` (row surgery on a model's stream state)."""

from .._compat import moved
from ..models import rows as _new

moved(__name__, _new)
