"""`glmcheck backends`: every backend found, where it came from and whether it runs here
(`glmcheck.evaluate.backends_here`)."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser("backends", help="list every backend found, where it came from and whether it runs here",
                       description="The built-in backends, transformers' own attention, every backend an installed "
                                   "package declares (entry-point group glmcheck.backends) and the NAME=MODULE:"
                                   "FUNCTION specs given with --backends: their source and whether each can run "
                                   "on this device at --heads heads per rank.")
    p.add_argument("--backends", default=None, help="also load these comma-separated specs (e.g. mine=pkg.mod:fn)")
    p.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda when present)")
    p.add_argument("--heads", type=int, default=8, help="attention heads per rank the check is for (default 8)")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    if isinstance(ns.heads, bool) or ns.heads < 1:
        raise ValueError(f"--heads must be a positive int, got {ns.heads}")


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.evaluate import backends_here

    report = backends_here(ns.backends, device=ns.device, heads=ns.heads)
    print(report.render())
    return report.exit_code
