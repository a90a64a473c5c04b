"""``python -m titans_atlas`` is the ``titans`` command."""

import sys

from .cli import main

# Guarded so that importing this module (by mistake, or by a tool that imports every module)
# never runs the command with the importer's arguments.
if __name__ == "__main__":
    sys.exit(main())
