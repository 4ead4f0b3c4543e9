"""The CLI side of every model check: call the check's one library function (`glmcheck.evaluate`)
with the record directory, then write the record and print the tables. Nothing is written before
the model is built: a fresh runs/<command>-<timestamp> is made only once the run starts."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from glmcheck.evaluate.report import Report
from glmcheck.process.phases import CLOCK
from glmcheck.records.store import default_run_dir


def run_report(ns: argparse.Namespace, command: str, call: Callable[..., Report], *, resumable: bool = False) -> int:
    """`call(record_dir)` runs the check: a resumable one keeps its finished items in `record_dir`
    (--out, or a callable making the default directory), another gets None. Then, on rank 0, the
    record is written (--out, the resumable run's directory, or a fresh default) and its tables
    printed. Returns the exit code: 0 PASS, 1 FAIL, 3 INCONCLUSIVE (bad input raises: exit 2)."""
    out = Path(ns.out) if ns.out else None
    report = call((out if out is not None else (lambda: default_run_dir(command))) if resumable else None)
    if not report.is_main:
        return report.exit_code
    with CLOCK.phase("write"):
        directory = report.record_dir or out or default_run_dir(command)
        report.write(directory, save_tensors=getattr(ns, "save_tensors", False),
                     overwrite=bool(getattr(ns, "overwrite", False)) and not resumable)
        form = getattr(ns, "format", "text")
        print(report.render(form))
        print(f"record: {Path(directory).resolve()}", file=sys.stderr if form == "json" else sys.stdout)  # absolute
    return report.exit_code
