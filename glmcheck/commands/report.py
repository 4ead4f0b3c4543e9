"""`glmcheck report DIR`: print a record's tables again (markdown document with --md)."""

from __future__ import annotations

import argparse

from glmcheck.records.report import render
from glmcheck.records.store import read_record


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="print the tables of a run record again",
                       description="Re-read a record directory written by layer0, logits or firsttoken and "
                                   "print its tables; exit 0 if its verdict was PASS, 1 otherwise.")
    p.add_argument("directory", help="record directory (holds summary.json)")
    p.add_argument("--md", action="store_true", help="a markdown document with the run's metadata")
    p.add_argument("--plots", action="store_true",
                   help="write the notebook's figures as PNG files next to every record under DIRECTORY")
    p.set_defaults(handler=handle)


def handle(ns: argparse.Namespace) -> int:
    if ns.plots:
        from glmcheck.records.plots import write_plots

        written = write_plots(ns.directory)
        if not written:
            raise ValueError(f"no plottable record (layer0, drift, firsttoken, union-stats) under {ns.directory}")
        for path in written:
            print(f"wrote {path}")
        return 0
    record = read_record(ns.directory)
    print(render(record.summary, record.rows, md=ns.md), end="" if ns.md else "\n")
    return 0 if record.summary.get("verdict") == "PASS" else 1
