"""Moved to ``titans_atlas.cli.eval`` (one module per subcommand family in ``cli/``)."""

from .._compat import moved
from ..cli import eval as _new

moved(__name__, _new)
