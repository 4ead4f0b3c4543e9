"""`glmcheck report DIR`: print a record's tables again (--format: text, md, wide or json)."""

from __future__ import annotations

import argparse
import sys

from glmcheck.commands.output_format import add_format_option


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="print the tables of a run record again",
                       description="Re-read a record directory written by layer0, logits, firsttoken, drift, "
                                   "sweep, union-stats or bench and print its tables; exit 0 if its verdict was PASS "
                                   "(or it has none, as union-stats and bench records), 3 if INCONCLUSIVE, 1 "
                                   "otherwise. A record edited after it was written (its content digest), or "
                                   "whose verdicts are not what its rows give, is refused in one line naming the "
                                   "field (exit 2).")
    p.add_argument("directory", help="record directory (holds summary.json)")
    p.add_argument("--md", action="store_true", help="a markdown document with the run's metadata (--format md)")
    add_format_option(p)
    p.add_argument("--plots", action="store_true",
                   help="write the notebook's figures as PNG files next to every record under DIRECTORY")
    p.set_defaults(handler=handle)


def handle(ns: argparse.Namespace) -> int:
    if ns.plots:
        from glmcheck.evaluate.arguments import check_writable_dir
        from glmcheck.records.plots import write_plots
        from glmcheck.records.store import find_records

        for record_dir in find_records(ns.directory):
            check_writable_dir(record_dir, "--plots")
        written = write_plots(ns.directory, lambda path, why: print(f"skipped {path}: {why}", file=sys.stderr))
        if not written:
            raise ValueError(f"no plottable record (layer0, drift, firsttoken, union-stats, sweep, tasks) under "
                             f"{ns.directory}")
        for path in written:
            print(f"wrote {path}")
        return 0
    from glmcheck.records.record_fields import check_record
    from glmcheck.records.rejudge import check_verdicts
    from glmcheck.records.render import TABLE_COMMANDS, render
    from glmcheck.records.store import read_record

    try:
        record = read_record(ns.directory)  # its content as written (the digest)
        form = "md" if ns.md else ns.format
        if record.summary.get("command") not in TABLE_COMMANDS:
            check_record(record.summary, record.rows)
        check_verdicts(record.summary, record.rows)  # its verdicts as its rows give them
        text = render(record.summary, record.rows, form)
    except ValueError as err:
        raise ValueError(f"{ns.directory}: {err}") from None
    print(text, end="" if form == "md" else "\n")
    verdict = record.summary.get("verdict")
    if verdict is None and record.summary.get("command") in TABLE_COMMANDS:
        return 0
    from glmcheck.checks.band import exit_code

    return exit_code(verdict)
