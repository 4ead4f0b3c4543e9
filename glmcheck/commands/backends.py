"""`glmcheck backends`: every backend found, where it came from and whether it runs here."""

from __future__ import annotations

import argparse

from glmcheck.records.tables import markdown_table


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
    from glmcheck.backends.errors import BackendError
    from glmcheck.backends.registry import backend_source, resolve_backend
    from glmcheck.backends.validation import HF_NAMES, all_backend_names, validate_backend
    from glmcheck.model.load import resolve_device

    precheck(ns)
    device = resolve_device(ns.device)
    specs = [s.strip() for s in (ns.backends or "").split(",") if s.strip()]
    for spec in specs:  # a spec that does not load is a usage error, like in the checks
        resolve_backend(spec)
    rows = []
    for name in all_backend_names():
        source = "transformers (no swap)" if name in HF_NAMES else None
        try:
            warnings = validate_backend(name, device=device, heads_per_rank=ns.heads)
            verdict = "yes" + (f" ({'; '.join(warnings)})" if warnings else "")
        except BackendError as err:
            verdict = f"no: {err}"
        rows.append([name, source or backend_source(name), verdict])
    print(markdown_table(["backend", "from", f"runs here ({device}, {ns.heads} heads per rank)"], rows))
    return 0
