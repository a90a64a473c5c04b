"""The ``titans`` command (also ``python -m titans_atlas``): a thin argparse layer over the
library. Each subcommand family is one module of this package -- ``cli/train.py`` (train,
prepare, consolidate), ``cli/generate.py``, ``cli/export.py``, ``cli/eval.py`` -- with
``add_parser(subparsers)`` that registers it and sets ``func(args) -> int``; this file only
lists those modules, so adding a subcommand is one line here. The command modules sit above
everything else (they may import train and eval both); nothing in the library imports them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules that register a subcommand, in the order `titans --help` lists them.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "titans_atlas.cli.train",
    "titans_atlas.cli.generate",
    "titans_atlas.cli.export",
    "titans_atlas.cli.eval",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="titans",
        description="Titans / ATLAS neural long-term memory: train, generate, evaluate.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
