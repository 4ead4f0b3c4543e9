"""`glmcheck layer0`: layer-0 attention output of every backend against the reference."""

from __future__ import annotations

import argparse

from glmcheck.commands.model_options import add_model_options, check_model_usage
from glmcheck.evaluate.arguments import check_count, check_repro_dir, check_text
from glmcheck.evaluate.options import GPU_TOKENS


def add_parser(sub) -> None:
    p = sub.add_parser("layer0", help="layer-0 attention output of every backend vs the reference",
                       description="Build the model's layer 0 (dummy weights or a checkpoint's layer 0), run a "
                                   "seeded prompt through every backend and compare the layer-0 attention "
                                   "output against the reference, beside a rerun control.")
    add_model_options(p, "layer0")
    p.add_argument("--tokens", type=int, default=None, help="prompt length (default 4096 on a GPU, 128 on the CPU)")
    p.add_argument("--repro", default=None, metavar="DIR",
                   help="write a minimal repro of each FAIL row's kernel call under DIR (a folder per backend: "
                        "call.safetensors and a standalone repro.py that exits 1 while the kernel fails)")
    p.add_argument("--text", default=None, help="use this text (tokenised, repeated up to --tokens) as the prompt")
    p.set_defaults(handler=handle, precheck=precheck, precompile_tokens=precompile_tokens)


def precheck(ns: argparse.Namespace) -> None:
    """What needs no model (`glmcheck.cli` runs it before any heavy import)."""
    check_model_usage(ns)
    check_count(ns.tokens, "--tokens")
    check_text(ns.text, "--text")
    check_repro_dir(ns.repro)


def precompile_tokens(ns: argparse.Namespace) -> list[int] | None:
    """The prompt length on a GPU, for `glmcheck.startup.precompile`: --tokens, which a --text prompt is repeated up to
    (a text longer than that, or one without --tokens, has its length only once tokenised)."""
    if ns.text is not None:
        return [ns.tokens] if ns.tokens is not None else None
    return [ns.tokens or GPU_TOKENS]


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.commands.common import run_report
    from glmcheck.evaluate import CheckOptions, layer0

    return run_report(ns, "layer0", lambda _: layer0(CheckOptions.from_namespace(ns), tokens=ns.tokens, text=ns.text,
                                                                  repro=ns.repro))
