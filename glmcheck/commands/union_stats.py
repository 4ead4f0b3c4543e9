"""`glmcheck union-stats`: valid rows per token and union-of-2/4 ratios of index sets
(`glmcheck.evaluate.index_unions`)."""

from __future__ import annotations

import argparse

from glmcheck.bench.names import INDEX_MODES
from glmcheck.evaluate.arguments import check_out_dir
from glmcheck.evaluate.index_unions import DEFAULT_MODE, DEFAULT_TOPK, check_union_options


def add_parser(sub) -> None:
    p = sub.add_parser("union-stats", help="valid rows/token and union-of-2/4 ratios of index sets",
                       description="Print valid rows per token and the union-of-2 / union-of-4 ratios for a "
                                   "captured trace (--indices FILE, every layer) or for synthetic indices at "
                                   "the five headline points (--synthetic, the default), beside the published "
                                   "GLM-5.1 targets.")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--indices", default=None, help="index trace from glmcheck capture-indices")
    source.add_argument("--synthetic", action="store_true", help="calibrated synthetic indices (default)")
    p.add_argument("--mode", default=None, choices=list(INDEX_MODES),
                   help=f"synthetic index model (default {DEFAULT_MODE}; not with --indices)")
    p.add_argument("--topk", type=int, default=None,
                   help=f"synthetic top-k (default {DEFAULT_TOPK}; not with --indices: a trace has its own)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="record directory (default runs/union-stats-<timestamp>); an "
                                               "existing record or non-empty directory is refused unless --overwrite")
    p.add_argument("--overwrite", action="store_true", help="replace the record in --out")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    """The options' checks (`glmcheck.cli` runs it before any heavy import)."""
    check_union_options(ns.indices, ns.mode, ns.topk, ns.seed)
    check_out_dir(ns.out, overwrite=ns.overwrite)


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.commands.common import run_report
    from glmcheck.evaluate.index_unions import union_stats

    precheck(ns)
    return run_report(ns, "union-stats", lambda _: union_stats(indices=ns.indices, mode=ns.mode, topk=ns.topk,
                                                                seed=ns.seed))
