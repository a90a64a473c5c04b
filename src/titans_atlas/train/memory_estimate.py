"""Moved to ``titans_atlas.memory_estimate.training`` (one home for memory estimates).

``python -m titans_atlas.train.memory_estimate`` still prints the table."""

from ..memory_estimate import training as _new

if __name__ == "__main__":
    _new.main()
else:
    from .._compat import moved

    moved(__name__, _new)
