"""`glmcheck firsttoken`: greedy first token of each prompt under each backend."""

from __future__ import annotations

import argparse
import dataclasses

from glmcheck.commands.model_options import add_model_options, check_model_usage
from glmcheck.commands.options import check_count, check_forwards, check_number
from glmcheck.data.prompts import PROMPT_SETS


def add_parser(sub) -> None:
    p = sub.add_parser("firsttoken", help="greedy first token per prompt: argmax agreement and dlogprob",
                       description="Greedy first token of each prompt under every backend, against the "
                                   "exact reference, beside the band (the reference rerun and --band ideal bf16 "
                                   "kernels).")
    add_model_options(p)
    p.add_argument("--prompts", default=None,
                   help=f"{' or '.join(PROMPT_SETS)} or a JSONL path (default: heldout50 on a reference model, "
                        "text of its corpus it never trained on; natural50 otherwise)")
    p.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    p.add_argument("--continue", dest="continue_tokens", type=int, default=0,
                   help="also compare a greedy N-token continuation (first divergence)")
    p.add_argument("--tie-gap", type=float, default=None,
                   help="a flip is a near tie when the reference's top-1/top-2 gap is <= this (nats, default "
                        "0.1) or <= gate-ratio x the band's largest |dlogprob|")
    p.add_argument("--max-dlogprob", type=float, default=None,
                   help="cap on mean |dlogprob| (nats): above it FAILS even within the band (only stricter)")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    """What needs no model (`glmcheck.cli` runs it before any heavy import)."""
    check_model_usage(ns, resumable=True)
    check_count(ns.continue_tokens, "--continue", minimum=0)
    check_number(ns.tie_gap, "--tie-gap")
    check_number(ns.max_dlogprob, "--max-dlogprob", positive=True)


def handle(ns: argparse.Namespace) -> int:
    from tqdm import tqdm

    from glmcheck.checks.firsttoken import DEFAULT_TIE_GAP, PromptOutcome, run_firsttoken
    from glmcheck.commands.common import CheckOutcome, Resume, run_check
    from glmcheck.data.model_tokenizer import model_tokenizer
    from glmcheck.data.prompts import load_prompts

    if ns.tie_gap is None:
        ns.tie_gap = DEFAULT_TIE_GAP

    def plan(prep):
        check_count(ns.continue_tokens, "--continue", minimum=0)
        check_number(ns.tie_gap, "--tie-gap")
        check_number(ns.max_dlogprob, "--max-dlogprob", positive=True)
        if ns.prompts is None:
            ns.prompts = "heldout50" if prep.spec.reference else "natural50"
        prompts = load_prompts(ns.prompts, ns.limit)
        steps = 1 + ns.continue_tokens  # a continuation re-runs the prefill for every step
        check_forwards(len(prompts) * prep.forward_count() * steps,
                       f"{len(prompts)} prompts x {prep.forward_count()} forwards x {steps} steps (--prompts, --limit, "
                       f"--band, --backends, --continue)")
        tokenizer = model_tokenizer(prep.spec, prep.config.vocab_size)
        for prompt in prompts:
            prep.check_prompt(len(tokenizer.encode(prompt.prompt)) + ns.continue_tokens,
                              f"--prompts {ns.prompts}: prompt {prompt.id!r} of tokens")

        resume = Resume(ns, prep, prep.fingerprint("firsttoken", prompts={p.id: p.prompt for p in prompts},
                                                   continue_tokens=ns.continue_tokens, tie_gap=ns.tie_gap,
                                                   max_dlogprob=ns.max_dlogprob),
                        total=len(prompts), what="prompts")
        done = {key: [PromptOutcome(**o) for o in payload] for key, payload in resume.done.items()}

        def run(model, out):
            resume.bind(out)

            def finished(prompt, outcomes):
                resume.save(prompt.id, [dataclasses.asdict(o) for o in outcomes])
                bar.update(1)

            with tqdm(total=len(prompts), initial=len(done), desc="firsttoken prompts", disable=prep.quiet,
                      leave=False) as bar:
                result = run_firsttoken(model, tokenizer, prompts, prep.backends, prep.exact, prep.options,
                                        gate_ratio=ns.gate_ratio, max_dlogprob=ns.max_dlogprob,
                                        band_size=prep.band_size,
                                        tie_gap=ns.tie_gap, continue_tokens=ns.continue_tokens, device=prep.device,
                                        on_prompt=finished, done=done)
            facts = {**result.facts, "prompt_set": ns.prompts, "prompts": len(prompts), "resumed_items": len(done)}
            return CheckOutcome([dataclasses.asdict(o) for o in result.outcomes], result.verdict, facts,
                                extra={"summary_rows": result.summary_rows, "disagreements": result.disagreements})
        return run

    return run_check(ns, "firsttoken", plan, resumable=True)
