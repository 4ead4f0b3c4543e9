"""`glmcheck repro RECORD ROW`: a minimal repro of one FAIL row of a layer0 or drift record, made after the fact.

The record keeps its command line: it is run again (the same model, prompt, band and options) with only ROW's
backend, as `--repro DIR` would have made it (`glmcheck.checks.repro`). A file-path plug-in is found from the
working directory, as in the first run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

REPRO_COMMANDS = ("layer0", "drift")


def add_parser(sub) -> None:
    p = sub.add_parser("repro", help="a minimal repro of one FAIL row of a layer0 or drift record",
                       description="Run a layer0 or drift record's command line again with only ROW's backend and "
                                   "write the minimal repro of its failing kernel call: the fewest tokens and heads "
                                   "that still FAIL, call.safetensors and a standalone repro.py (exit 1 while the "
                                   "kernel fails, 0 once fixed).")
    p.add_argument("record", help="a layer0 or drift record directory (holds summary.json)")
    p.add_argument("row", help="the row's backend, as its table names it")
    p.add_argument("--out", default=None, help="where the repro goes (default RECORD/repro; new or empty); the "
                                               "rerun's own record goes to OUT/record")
    p.set_defaults(handler=handle, precheck=precheck)


def rerun_arguments(summary: dict, row: str, out: Path) -> list[str]:
    """The record's command line with only `row`'s backend (its --backends spec when it named one), the band's and the
    reference's forms it ran, --repro `out` and --out `out`/record. ValueError naming what the record lacks."""
    command = summary.get("command")
    if command not in REPRO_COMMANDS:
        raise ValueError(f"RECORD is a {command} record; a repro is made from a {' or '.join(REPRO_COMMANDS)} record")
    argv = list(summary.get("argv") or [])
    if command not in argv:
        raise ValueError("RECORD: its command line (argv) is not in summary.json")
    argv = argv[argv.index(command) + 1:]
    failing = {r.get("backend") for r in summary.get("rows", []) if r.get("verdict") == "FAIL"}
    if row not in failing:
        raise ValueError(f"ROW {row!r} is not a FAIL row of RECORD (FAIL rows: {', '.join(sorted(failing)) or 'none'})")
    kept, specs, skip = [], {}, False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg in ("--backends", "--out", "--repro"):
            if arg == "--backends" and i + 1 < len(argv):
                specs = {s.split("=", 1)[0]: s for s in argv[i + 1].split(",") if s}
            skip = True
            continue
        if arg.startswith(("--backends=", "--out=", "--repro=")):
            if arg.startswith("--backends="):
                specs = {s.split("=", 1)[0]: s for s in arg.split("=", 1)[1].split(",") if s}
            continue
        if arg != "--overwrite":
            kept.append(arg)
    options = summary.get("options", {})
    for flag, key in (("--band-impl", "band_impl"), ("--reference-impl", "reference_impl")):
        if options.get(key) and not any(arg == flag or arg.startswith(flag + "=") for arg in kept):
            kept += [flag, str(options[key])]  # the forms the record ran, also where the environment chose them
    return [command, *kept, "--backends", specs.get(row, row), "--repro", str(out), "--out", str(out / "record"),
            "--quiet"]


def precheck(ns: argparse.Namespace) -> None:
    from glmcheck.evaluate.arguments import check_repro_dir

    if not (Path(ns.record) / "summary.json").is_file():
        raise ValueError(f"RECORD {ns.record} holds no summary.json (a record directory is expected)")
    out = Path(ns.out) if ns.out is not None else Path(ns.record) / "repro"
    if out.is_dir() and any(out.iterdir()):
        raise ValueError(f"--out {out} is not empty; name a new or empty directory")
    check_repro_dir(out, "--out")


def handle(ns: argparse.Namespace) -> int:
    import json

    from glmcheck.cli import build_parser

    summary = json.loads((Path(ns.record) / "summary.json").read_text())
    out = Path(ns.out) if ns.out is not None else Path(ns.record) / "repro"
    argv = rerun_arguments(summary, ns.row, out)
    rerun = build_parser(argv).parse_args(argv)
    rerun.precheck(rerun)
    return rerun.handler(rerun)
