"""Old import paths kept working after a module moved: a shim warns once and becomes the
module's new home (so attributes, private names and ``mock.patch`` targets all resolve)."""

from __future__ import annotations

import sys
import warnings
from types import ModuleType


def moved(old: str, new: ModuleType) -> None:
    """Make the module ``old`` an alias of ``new``, with a DeprecationWarning naming both."""
    warnings.warn(
        f"{old} moved to {new.__name__}; import it from there",
        DeprecationWarning,
        stacklevel=3,
    )
    sys.modules[old] = new
