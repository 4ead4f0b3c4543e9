"""`glmcheck selfcheck`: the former name of `glmcheck kernel-check` (a name too close to `selftest` for a command that
checks the kernel, not glmcheck), kept working with a one-line notice."""

from __future__ import annotations

import argparse
import sys

from glmcheck.commands import kernel_check

HELP = "the former name of kernel-check (deprecated)"


def add_parser(sub) -> None:
    p = sub.add_parser("selfcheck", help=HELP, description=kernel_check.DESCRIPTION)
    kernel_check.add_options(p)
    p.set_defaults(handler=handle)


def handle(ns: argparse.Namespace) -> int:
    print("glmcheck selfcheck is deprecated: it is now glmcheck kernel-check (the same options)", file=sys.stderr)
    return kernel_check.handle(ns)
