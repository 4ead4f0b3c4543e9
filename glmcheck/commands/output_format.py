"""`--format`, the option every command that prints a check's tables takes (no heavy import)."""

from __future__ import annotations

import argparse

FORMATS = ("text", "md", "wide", "json")  # glmcheck.records.render.FORMATS (tests keep the two equal)


def add_format_option(parser: argparse.ArgumentParser) -> None:
    """--format text|md|wide|json."""
    parser.add_argument("--format", default="text", choices=FORMATS, metavar="FORM",
                        help="text (120 columns, default), md, wide (every column) or json")
