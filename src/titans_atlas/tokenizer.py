"""Moved to ``titans_atlas.tokenizers`` (bytes, ids, GPT-2 BPE and HF tokenizers)."""

from . import tokenizers as _new
from ._compat import moved

moved(__name__, _new)
