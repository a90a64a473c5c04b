"""The ``titans`` command (also ``python -m titans_atlas``): a thin argparse layer over the
library. Each subcommand lives beside the code it drives, in a module with
``add_parser(subparsers)`` that registers it and sets ``func(args) -> int``; this file only
lists those modules, so adding a subcommand is one line here.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules that register a subcommand, in the order `titans --help` lists them.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "titans_atlas.train.cli",
    "titans_atlas.generate_cli",
    "titans_atlas.integrations.export",
    "titans_atlas.eval.command",
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
