"""Moved to ``titans_atlas.models.pretrained`` (the model-directory format; see ``io``)."""

from ._compat import moved
from .models import pretrained as _new

moved(__name__, _new)
