"""Moved to ``titans_atlas.cli.train`` (one module per subcommand family in ``cli/``)."""

from .._compat import moved
from ..cli import train as _new

moved(__name__, _new)
