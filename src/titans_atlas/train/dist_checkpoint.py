"""Moved to ``titans_atlas.io.sharded`` (the format) and ``titans_atlas.train.checkpointing``
(``consolidate``, which needs the run's config)."""

import warnings

from ..io.sharded import *  # noqa: F403
from ..io.sharded import MODEL_DIR, SHARDS, load_stream_rows  # noqa: F401
from .checkpointing import consolidate  # noqa: F401

warnings.warn(
    f"{__name__} moved to titans_atlas.io.sharded (consolidate: titans_atlas.train.checkpointing)",
    DeprecationWarning,
    stacklevel=2,
)
