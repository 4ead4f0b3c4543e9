"""`--format`, the option every command that prints a check's tables takes (no heavy import)."""

from __future__ import annotations

import argparse

FORMATS = ("text", "md", "wide", "json")  # glmcheck.records.render.FORMATS (tests keep the two equal)


def add_format_option(parser: argparse.ArgumentParser) -> None:
    """--format text|md|wide|json."""
    parser.add_argument("--format", default="text", choices=FORMATS,
                        help="text (default): tables fit 120 columns, notes numbered under them; md: a markdown "
                             "document with the run's metadata; wide: every column and note in full; json: the "
                             "record's rows, verdict and facts on stdout")
