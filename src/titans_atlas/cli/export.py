"""``titans export``: write a model in another format.

    titans export --format hf MODEL_DIR HF_DIR        our model directory -> Hugging Face folder
    titans export --format titans HF_DIR MODEL_DIR    a Hugging Face folder -> our model directory

Needs the [hf] extra; ``titans --help`` works without it (transformers is imported on use).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..validation import check_writable_dir


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help="convert a model directory to a Hugging Face folder, or back",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("source", type=Path, help="the directory to read")
    parser.add_argument("destination", type=Path, help="the directory to write")
    parser.add_argument(
        "--format",
        required=True,
        choices=("hf", "titans"),
        help="format to write: hf (transformers folder) or titans (our model directory)",
    )
    parser.add_argument(
        "--force", action="store_true", help="write into a destination that is not empty"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        check_writable_dir("destination", args.destination)
    except ValueError as err:
        return _fail(str(err))
    if args.destination.exists() and any(args.destination.iterdir()) and not args.force:
        return _fail(f"{args.destination} is not empty (pass --force to write into it)")
    try:
        from ..integrations.hf import export_hf, import_hf
    except ImportError as err:
        return _fail(str(err))
    convert = export_hf if args.format == "hf" else import_hf
    try:
        written = convert(args.source, args.destination)
    except (ValueError, OSError) as err:  # CheckpointError is a ValueError
        return _fail(str(err))
    print(f"wrote {written}")
    return 0


def _fail(message: str) -> int:
    print(f"titans export: error: {message}", file=sys.stderr)
    return 1
