"""`glmcheck drift`: per-layer hidden-state drift of every backend against the reference."""

from __future__ import annotations

import argparse

from glmcheck.commands.model_options import add_model_options, check_model_usage
from glmcheck.commands.options import check_count


def add_parser(sub) -> None:
    p = sub.add_parser("drift", help="per-layer hidden-state drift against the reference",
                       description="One forward per backend (the exact reference twice, the band's variants once each) "
                                   "capturing every layer's hidden state in fp64; rows per (backend, layer) against "
                                   "the exact reference beside the band at that layer.")
    add_model_options(p)
    p.add_argument("--tokens", type=int, default=None, help="prompt length (default 4096 on a GPU, 128 on the CPU)")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    """What needs no model (`glmcheck.cli` runs it before any heavy import)."""
    check_model_usage(ns)
    check_count(ns.tokens, "--tokens")


def handle(ns: argparse.Namespace) -> int:
    from tqdm import tqdm

    from glmcheck.checks.drift import run_drift
    from glmcheck.commands.common import CheckOutcome, run_check
    from glmcheck.data.model_prompts import model_prompt, prompt_source

    def plan(prep):
        tokens = prep.prompt_tokens(ns.tokens)

        def run(model, out):
            ids = model_prompt(prep.spec, model.config.vocab_size, tokens, ns.seed, prep.device)
            with tqdm(total=prep.forward_count(), desc="drift backends", disable=prep.quiet, leave=False) as bar:
                result = run_drift(model, ids, prep.backends, prep.exact, prep.options, prep.gate,
                                   band_size=prep.band_size, progress=bar)
            return CheckOutcome([r.as_dict() for r in result.rows], result.verdict,
                                {**result.facts, "prompt_source": prompt_source(prep.spec)})
        return run

    return run_check(ns, "drift", plan)
