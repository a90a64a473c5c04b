"""The evaluation's optional dependencies: ``titans_atlas.extras`` (their one home)."""

from __future__ import annotations

from ..extras import MissingDependencyError, require

__all__ = ["MissingDependencyError", "require"]
