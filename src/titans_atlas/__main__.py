"""``python -m titans_atlas`` is the ``titans`` command."""

import sys

from .cli import main

sys.exit(main())
