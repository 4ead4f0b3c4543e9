"""`glmcheck sweep`: at which prompt length does a backend leave the band?"""

from __future__ import annotations

import argparse

from glmcheck.commands.endpoint_options import (
    add_endpoint_options,
    add_logprobs_option,
    check_endpoint_usage,
    check_logprobs_option,
    http_options,
)
from glmcheck.commands.model_options import add_model_options, check_model_usage, refuse_band_gate_options
from glmcheck.evaluate.options import GPU_SWEEP_RANGE


def add_parser(sub) -> None:
    p = sub.add_parser("sweep", help="where along the prompt length does a backend leave the band?",
                       description="One forward (or one request per server) over the longest length of a geometric "
                                   "grid: every position's next-token distribution against the exact reference's, "
                                   "binned by prompt length and judged beside the band's same positions; reports "
                                   "each backend's onset (the first length out of the band), whether it stays out, "
                                   "and a plot (report --plots).")
    add_model_options(p, "sweep")
    p.add_argument("--tokens", default=None, metavar="A..B",
                   help="lengths from A to B tokens, doubling (default 1024..32768 on a GPU or against servers, "
                        "32..256 on the CPU)")
    p.add_argument("--per-octave", type=int, default=1, metavar="N",
                   help="grid points per doubling of the length (default 1)")
    add_logprobs_option(p)
    add_endpoint_options(p)
    p.set_defaults(handler=handle, precheck=precheck, precompile_tokens=precompile_tokens)


def precheck(ns: argparse.Namespace) -> None:
    """What needs no model (`glmcheck.cli` runs it before any heavy import)."""
    from glmcheck.checks.sweep import geometric_lengths, parse_token_range

    check_model_usage(ns, resumable=True)
    check_endpoint_usage(ns)
    if ns.tokens is not None:
        geometric_lengths(*parse_token_range(ns.tokens), ns.per_octave)
    check_logprobs_option(ns)
    refuse_band_gate_options(ns, "the sweep")


def precompile_tokens(ns: argparse.Namespace) -> list[int] | None:
    """The longest length on a GPU (the one forward per row), for `glmcheck.startup.precompile`; none against
    servers."""
    return None if ns.endpoint else [int(ns.tokens.split("..")[-1]) if ns.tokens is not None else GPU_SWEEP_RANGE[1]]


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.checks.sweep import parse_token_range
    from glmcheck.commands.common import run_report
    from glmcheck.evaluate import CheckOptions, sweep

    tokens = parse_token_range(ns.tokens) if ns.tokens is not None else None
    if ns.endpoint:
        from glmcheck.evaluate import sweep_endpoints

        return run_report(ns, "sweep", lambda record_dir: sweep_endpoints(
            ns.endpoint, ns.band_endpoint or [], tokenizer=CheckOptions.from_namespace(ns),
            tokens=tokens or GPU_SWEEP_RANGE, per_octave=ns.per_octave, logprobs=ns.logprobs,
            concurrency=ns.concurrency or 4, http=http_options(ns), record_dir=record_dir, overwrite=ns.overwrite,
            quiet=ns.quiet), resumable=True)
    return run_report(ns, "sweep", lambda record_dir: sweep(
        CheckOptions.from_namespace(ns), tokens=tokens, per_octave=ns.per_octave, logprobs=ns.logprobs,
        record_dir=record_dir, overwrite=ns.overwrite), resumable=True)
