"""`glmcheck logits`: next-token distributions at every position, over the full vocabulary, per backend and length."""

from __future__ import annotations

import argparse
from collections import Counter

from glmcheck.commands.endpoint_options import (
    add_endpoint_options,
    add_logprobs_option,
    check_endpoint_usage,
    check_logprobs_option,
    http_options,
)
from glmcheck.commands.model_options import add_model_options, check_model_usage, refuse_band_gate_options
from glmcheck.evaluate.arguments import check_count
from glmcheck.evaluate.options import GPU_LOGITS_LENGTHS

ENDPOINT_TOKENS = 4096  # against servers: one prompt of this many tokens unless --tokens names another


def _lengths(text: str | None, default: str) -> list[int]:
    """The prompt lengths of --tokens (`default` when not given): positive ints, each once."""
    items = [x.strip() for x in (default if text is None else text).split(",")]
    shown = repr(text) if text is None or len(text) <= 60 else repr(text[:50] + "...") + f" ({len(items)} items)"
    if "" in items and items != [""]:
        raise ValueError(f"--tokens must be a comma-separated list of positive ints, got {shown} (an empty item)")
    try:
        lengths = [int(x) for x in items]
    except ValueError:
        raise ValueError(f"--tokens must be a comma-separated list of positive ints, got {shown}") from None
    if any(n < 1 for n in lengths):
        raise ValueError(f"--tokens must be a comma-separated list of positive ints, got {shown}")
    counts = Counter(lengths)
    twice = [str(n) for n, count in counts.items() if count > 1]
    if twice:
        named = ", ".join(twice[:5]) + (f" and {len(twice) - 5} more" if len(twice) > 5 else "")
        raise ValueError(f"--tokens names {named} more than once ({shown}); each length runs once, its rows would be "
                         f"written twice")
    return lengths


def add_parser(sub) -> None:
    p = sub.add_parser("logits", help="next-token distributions at every position, per backend and prompt length",
                       description="Run a prompt of each length through the whole model under every backend and "
                                   "compare the next-token distribution at every position (KL in fp64) with the "
                                   "reference's, beside the band's; the final position is shown beside.")
    add_model_options(p, "logits")
    p.add_argument("--tokens", default=None, metavar="N,M",
                   help=f"comma-separated lengths (default 2048,4096,8192 on a GPU, 64,128 on the CPU; "
                        f"{ENDPOINT_TOKENS} against servers)")
    p.add_argument("--dense-threshold", type=int, default=None, metavar="N",
                   help="layers whose KV length is <= N attend densely, for every absorbed backend")
    add_logprobs_option(p)
    add_endpoint_options(p)
    p.set_defaults(handler=handle, precheck=precheck, precompile_tokens=precompile_tokens)


def precheck(ns: argparse.Namespace) -> None:
    """What needs no model (`glmcheck.cli` runs it before any heavy import)."""
    check_model_usage(ns, resumable=True)
    check_endpoint_usage(ns)
    if ns.tokens is not None:  # the default depends on the device
        lengths = _lengths(ns.tokens, "")
        if ns.endpoint and len(lengths) != 1:
            raise ValueError(f"--tokens: with --endpoint logits judges every position of one prompt; name one "
                             f"length, got {len(lengths)} ({ns.tokens!r}); `glmcheck sweep --endpoint` bins one "
                             f"prompt by length")
    check_count(ns.dense_threshold, "--dense-threshold", minimum=0)
    check_logprobs_option(ns)
    refuse_band_gate_options(ns, "logits")


def precompile_tokens(ns: argparse.Namespace) -> list[int] | None:
    """The prompt lengths on a GPU, for `glmcheck.startup.precompile` (none against servers)."""
    return None if ns.endpoint else _lengths(ns.tokens, "") if ns.tokens is not None else list(GPU_LOGITS_LENGTHS)


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.commands.common import run_report
    from glmcheck.evaluate import CheckOptions, logits

    lengths = _lengths(ns.tokens, "") if ns.tokens is not None else None  # None: the device's default lengths
    if ns.endpoint:
        from glmcheck.evaluate import logits_endpoints

        return run_report(ns, "sweep", lambda record_dir: logits_endpoints(
            ns.endpoint, ns.band_endpoint or [], tokenizer=CheckOptions.from_namespace(ns),
            tokens=lengths[0] if lengths else ENDPOINT_TOKENS, logprobs=ns.logprobs, concurrency=ns.concurrency or 4,
            http=http_options(ns), record_dir=record_dir, overwrite=ns.overwrite, quiet=ns.quiet), resumable=True)
    return run_report(ns, "logits", lambda record_dir: logits(CheckOptions.from_namespace(ns), tokens=lengths,
                                                              record_dir=record_dir, overwrite=ns.overwrite),
                      resumable=True)

