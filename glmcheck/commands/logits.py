"""`glmcheck logits`: next-token logits over the full vocabulary, per backend and length."""

from __future__ import annotations

import argparse
import dataclasses
from collections import Counter

from glmcheck.commands.model_options import add_model_options, check_model_usage
from glmcheck.commands.options import check_count, check_forwards


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
    p = sub.add_parser("logits", help="final-position logits per backend and prompt length",
                       description="Run seeded prompts of each length through the whole model under every "
                                   "backend and compare the next-token logits (fp64) with the reference.")
    add_model_options(p)
    p.add_argument("--tokens", default=None, help="comma-separated lengths (default 2048,4096,8192 on a GPU, "
                                                   "64,128 on the CPU)")
    p.add_argument("--dense-threshold", type=int, default=None,
                   help="layers whose KV length is <= N attend densely, for every absorbed backend")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    """What needs no model (`glmcheck.cli` runs it before any heavy import)."""
    check_model_usage(ns, resumable=True)
    if ns.tokens is not None:  # the default depends on the device
        _lengths(ns.tokens, "")
    check_count(ns.dense_threshold, "--dense-threshold", minimum=0)


def handle(ns: argparse.Namespace) -> int:
    from tqdm import tqdm

    from glmcheck.checks.logits import run_logits
    from glmcheck.commands.common import CheckOutcome, Resume, run_check
    from glmcheck.data.model_prompts import model_prompt, prompt_source

    def plan(prep):
        lengths = _lengths(ns.tokens, "2048,4096,8192" if prep.device.type == "cuda" else "64,128")
        check_count(ns.dense_threshold, "--dense-threshold", minimum=0)
        check_forwards(len(lengths) * prep.forward_count(),
                       f"{len(lengths)} lengths x {prep.forward_count()} forwards each (--tokens, --band, --backends)")
        for tokens in lengths:
            prep.check_prompt(tokens)
        resume = Resume(ns, prep, prep.fingerprint("logits", lengths=lengths, seed=ns.seed), total=len(lengths),
                        what="lengths")
        done = {int(key): [_row(r) for r in payload] for key, payload in resume.done.items()}

        def run(model, out):
            resume.bind(out)
            prompts = [model_prompt(prep.spec, model.config.vocab_size, n, ns.seed + n, prep.device) for n in lengths]

            def finished(tokens, rows):
                resume.save(str(tokens), [dataclasses.asdict(r) for r in rows])
                bar.update(1)

            with tqdm(total=len(lengths), initial=len(done), desc="logits lengths", disable=prep.quiet,
                      leave=False) as bar:
                result = run_logits(model, prompts, prep.backends, prep.exact, prep.options, prep.gate,
                                    band_size=prep.band_size, baseline=prep.baseline, on_length=finished, done=done)
            return CheckOutcome([r.as_dict() for r in result.rows], result.verdict,
                                {**result.facts, "resumed_items": len(done), "prompt_source": prompt_source(prep.spec)}, tensors=result.tensors)
        return run

    return run_check(ns, "logits", plan, resumable=True)


def _row(payload: dict):
    from glmcheck.checks.common import ComparisonRow

    return ComparisonRow(**payload)
