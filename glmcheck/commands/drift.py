"""`glmcheck drift`: per-layer hidden-state drift of every backend against the reference."""

from __future__ import annotations

import argparse

from glmcheck.commands.model_options import add_model_options, check_model_usage
from glmcheck.evaluate.arguments import check_count, check_repro_dir
from glmcheck.evaluate.options import GPU_TOKENS


def add_parser(sub) -> None:
    p = sub.add_parser("drift", help="per-layer hidden-state drift against the reference",
                       description="One forward per backend (the exact reference twice, the band's variants once each) "
                                   "capturing every layer's hidden state in fp64; rows per (backend, layer) against "
                                   "the exact reference beside the band at that layer.")
    add_model_options(p, "drift")
    p.add_argument("--tokens", type=int, default=None, help="prompt length (default 4096 on a GPU, 128 on the CPU)")
    p.add_argument("--repro", default=None, metavar="DIR",
                   help="write a minimal repro of each FAIL row's kernel call under DIR (a folder per backend: "
                        "call.safetensors and a standalone repro.py that exits 1 while the kernel fails)")
    p.set_defaults(handler=handle, precheck=precheck, precompile_tokens=lambda ns: [ns.tokens or GPU_TOKENS])


def precheck(ns: argparse.Namespace) -> None:
    """What needs no model (`glmcheck.cli` runs it before any heavy import)."""
    check_model_usage(ns)
    check_count(ns.tokens, "--tokens")
    check_repro_dir(ns.repro)


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.commands.common import run_report
    from glmcheck.evaluate import CheckOptions, drift

    return run_report(ns, "drift", lambda _: drift(CheckOptions.from_namespace(ns), tokens=ns.tokens,
                                                                repro=ns.repro))
