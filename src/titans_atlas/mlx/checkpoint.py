"""Moved to ``titans_atlas.mlx.models.pretrained`` (mirrors ``titans_atlas.models.pretrained``)."""

from .._compat import moved
from .models import pretrained as _new

moved(__name__, _new)
