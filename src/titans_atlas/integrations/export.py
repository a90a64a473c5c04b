"""Moved to ``titans_atlas.cli.export`` (one module per subcommand family in ``cli/``)."""

from .._compat import moved
from ..cli import export as _new

moved(__name__, _new)
