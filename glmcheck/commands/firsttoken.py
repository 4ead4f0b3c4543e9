"""`glmcheck firsttoken`: greedy first token of each prompt under each backend."""

from __future__ import annotations

import argparse

from glmcheck.commands.endpoint_options import add_endpoint_options, check_endpoint_usage, http_options
from glmcheck.commands.model_options import add_model_options, check_model_usage
from glmcheck.data.prompts import PROMPT_SETS
from glmcheck.evaluate.arguments import check_count, check_number, check_tie_gap


def add_parser(sub) -> None:
    p = sub.add_parser("firsttoken", help="greedy first token per prompt: argmax agreement and dlogprob",
                       description="Greedy first token of each prompt under every backend, against the "
                                   "exact reference, beside the band (the reference rerun and --band ideal bf16 "
                                   "kernels).")
    add_model_options(p, "firsttoken")
    p.add_argument("--prompts", default=None,
                   help=f"{', '.join(PROMPT_SETS)} or a JSONL file (default heldout50 on a trained model, "
                        "natural50 otherwise)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N prompts")
    p.add_argument("--continue", dest="continue_tokens", type=int, default=0, metavar="N",
                   help="also compare greedy N-token continuations (as vLLM's check_logprobs_close)")
    p.add_argument("--tie-gap", type=float, default=None, metavar="NATS",
                   help="a flip within this top-1/top-2 gap (nats, default 0.1) or gate-ratio x the band's max "
                        "|dlogprob| is a near tie")
    p.add_argument("--max-dlogprob", type=float, default=None, metavar="NATS",
                   help="cap on mean |dlogprob|: above it FAILS (only stricter)")
    p.add_argument("--logprobs", type=int, default=None, metavar="K",
                   help="with --endpoint: top-k asked of each server (default 5, at least 2)")
    add_endpoint_options(p)
    p.set_defaults(handler=handle, precheck=precheck,
                   precompile_tokens=lambda ns: None if ns.endpoint else "prompts")  # glmcheck.cli.PROMPTS


def precheck(ns: argparse.Namespace) -> None:
    """What needs no model (`glmcheck.cli` runs it before any heavy import)."""
    check_model_usage(ns, resumable=True)
    check_endpoint_usage(ns)
    if ns.logprobs is not None and not ns.endpoint:
        raise ValueError("--logprobs applies to running servers (in process every logprob is known): add --endpoint")
    check_count(ns.logprobs, "--logprobs", minimum=2)
    check_count(ns.continue_tokens, "--continue", minimum=0)
    check_tie_gap(ns.tie_gap, "--tie-gap")
    check_number(ns.max_dlogprob, "--max-dlogprob", positive=True)


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.commands.common import run_report

    if ns.endpoint:
        from glmcheck.evaluate import firsttoken_endpoints

        return run_report(ns, "firsttoken", lambda record_dir: firsttoken_endpoints(
            ns.endpoint, ns.band_endpoint or [], prompts=ns.prompts, limit=ns.limit, continue_tokens=ns.continue_tokens,
            logprobs=ns.logprobs or 5, tie_gap=ns.tie_gap, max_dlogprob=ns.max_dlogprob, gate_ratio=ns.gate_ratio,
            concurrency=ns.concurrency or 4, http=http_options(ns), record_dir=record_dir, overwrite=ns.overwrite,
            quiet=ns.quiet), resumable=True)
    from glmcheck.evaluate import CheckOptions, firsttoken

    return run_report(ns, "firsttoken", lambda record_dir: firsttoken(
        CheckOptions.from_namespace(ns), prompts=ns.prompts, limit=ns.limit, continue_tokens=ns.continue_tokens,
        tie_gap=ns.tie_gap, max_dlogprob=ns.max_dlogprob, record_dir=record_dir, overwrite=ns.overwrite),
        resumable=True)
