"""`glmcheck layer0`: layer-0 attention output of every backend against the reference."""

from __future__ import annotations

import argparse

from glmcheck.commands.model_options import add_model_options, check_model_usage
from glmcheck.commands.options import check_count


def add_parser(sub) -> None:
    p = sub.add_parser("layer0", help="layer-0 attention output of every backend vs the reference",
                       description="Build the model's layer 0 (dummy weights or a checkpoint's layer 0), run a "
                                   "seeded prompt through every backend and compare the layer-0 attention "
                                   "output against the reference, beside a rerun control.")
    add_model_options(p)
    p.add_argument("--tokens", type=int, default=None, help="prompt length (default 4096 on a GPU, 128 on the CPU)")
    p.add_argument("--text", default=None, help="use this text (tokenised, repeated up to --tokens) as the prompt")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    """What needs no model (`glmcheck.cli` runs it before any heavy import)."""
    check_model_usage(ns)
    check_count(ns.tokens, "--tokens")


def handle(ns: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from glmcheck.checks.layer0 import run_layer0
    from glmcheck.commands.common import CheckOutcome, run_check
    from glmcheck.data.model_prompts import model_prompt, prompt_source
    from glmcheck.data.model_tokenizer import model_tokenizer
    from glmcheck.data.prompts import text_prompt

    def plan(prep):
        tokens = prep.prompt_tokens(ns.tokens)
        text_ids = None
        if ns.text is not None:
            text_ids = model_tokenizer(prep.spec, prep.config.vocab_size).encode(ns.text)
            prep.check_prompt(max(len(text_ids), tokens), "--text (tokens)")

        def run(model, out):
            if text_ids is not None:
                ids = text_prompt(text_ids, ns.tokens, prep.device)
            else:
                ids = model_prompt(prep.spec, model.config.vocab_size, tokens, ns.seed, prep.device)
            with tqdm(total=prep.forward_count(), desc="layer0 backends", disable=prep.quiet, leave=False) as bar, \
                    torch.inference_mode():
                result = run_layer0(model, ids, prep.backends, prep.exact, prep.options, prep.gate,
                                    band_size=prep.band_size, baseline=prep.baseline, progress=bar)
            return CheckOutcome([r.as_dict() for r in result.rows], result.verdict,
                                {**result.facts, "prompt_source": prompt_source(prep.spec)},
                                tensors=result.tensors)
        return run

    return run_check(ns, "layer0", plan, layer0_only=True)
