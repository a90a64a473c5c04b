"""Moved to ``titans_atlas.tokenizers.bpe`` (bytes, ids, GPT-2 BPE and HF tokenizers)."""

from ._compat import moved
from .tokenizers import bpe as _new

moved(__name__, _new)
