"""Moved to ``titans_atlas.cli.recall_report`` (one module per subcommand family in ``cli/``)."""

from .._compat import moved
from ..cli import recall_report as _new

moved(__name__, _new)
