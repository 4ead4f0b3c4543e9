"""`glmcheck capture-indices`: record every full indexer layer's top-k from a model run
(`glmcheck.evaluate.index_capture`)."""

from __future__ import annotations

import argparse

from glmcheck.evaluate.arguments import check_count, check_experts, check_layers, check_out_file, check_seed
from glmcheck.model.names import model_names
from glmcheck.model.trained import DEFAULT_MODEL


def add_parser(sub) -> None:
    p = sub.add_parser("capture-indices", help="record every full indexer layer's top-k from a model run",
                       description="Run seeded prompts through the model and write each full indexer layer's "
                                   "top-k (kernel convention: index > t -> -1) to a safetensors trace.")
    p.add_argument("--model", default=DEFAULT_MODEL, choices=model_names(),
                   help=f"trained model or dummy preset (default {DEFAULT_MODEL})")
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--experts", type=int, default=None)
    p.add_argument("--init", default="sharp", choices=["hf", "sharp"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None)
    p.add_argument("--tokens", type=int, required=True, help="tokens per sequence")
    p.add_argument("--batch", type=int, default=1, help="independent sequences (one KV pool)")
    p.add_argument("--out", required=True, help="trace file (.safetensors); an existing file is refused unless "
                                                "--overwrite")
    p.add_argument("--overwrite", action="store_true", help="replace the file --out names")
    p.add_argument("--backend", default=None,
                   help="attention backend of the run (absorbed sparse path; default: the kernel under test on a "
                        "GPU, the fp32 reference on the CPU)")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    """What needs no model (`glmcheck.cli` runs it before any heavy import)."""
    check_count(ns.tokens, "--tokens")
    check_count(ns.batch, "--batch")
    if not ns.checkpoint:  # with one, config_of refuses any --layers / --experts but its own
        check_layers(ns.layers)
        check_experts(ns.experts)
    check_seed(ns.seed)
    check_out_file(ns.out, suffix=".safetensors", overwrite=ns.overwrite)


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.evaluate.index_capture import capture_trace
    from glmcheck.evaluate.options import CheckOptions

    precheck(ns)
    report = capture_trace(CheckOptions.from_namespace(ns), ns.out, tokens=ns.tokens, batch=ns.batch,
                           backend=ns.backend)
    print(report.render())
    return report.exit_code
