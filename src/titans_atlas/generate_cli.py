"""Moved to ``titans_atlas.cli.generate`` (one module per subcommand family in ``cli/``)."""

from ._compat import moved
from .cli import generate as _new

moved(__name__, _new)
