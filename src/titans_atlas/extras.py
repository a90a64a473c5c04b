"""Optional dependencies (evaluation, tasks), imported only when a task needs them.

A missing one is an error that names what to install -- never a silent fallback to another
splitter, word list or dataset.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingDependencyError(ImportError):
    """An optional package an evaluation needs is not installed."""


def require(module: str, purpose: str, extra: str = "eval") -> ModuleType:
    """Import ``module`` or raise MissingDependencyError naming the package and the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        package = module.split(".")[0]
        raise MissingDependencyError(
            f"{purpose} needs the '{package}' package: pip install 'titans-atlas[{extra}]' "
            f"(or pip install {package})"
        ) from err
