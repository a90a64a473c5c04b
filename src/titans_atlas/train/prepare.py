"""Moved to ``titans_atlas.train.data.prepare`` (train/ is split into config, data, loop,
checkpointing and distributed parts)."""

import importlib

from .._compat import moved

moved(__name__, importlib.import_module(".data.prepare", __package__))
