"""`glmcheck plan`: memory needed per GPU for a preset and TP degree, before loading anything
(`glmcheck.evaluate.memory_plan`)."""

from __future__ import annotations

import argparse

from glmcheck.commands.model_options import add_engine_options, add_kv_cache_option
from glmcheck.evaluate.arguments import check_count, check_experts, check_layers, check_number
from glmcheck.evaluate.memory_plans import check_serving_options
from glmcheck.model.presets import PRESETS


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="memory per GPU for a preset at a TP degree (printed before loading)",
                       description="Per-rank weights (exact, from the module shapes and the sharding rules) and a "
                                   "conservative activation estimate for one prefill, on the absorbed path and on "
                                   "transformers' dense hf_sdpa / hf_eager paths, with the largest --layers and "
                                   "--tokens that fit.",
                       epilog="--calls serving: also the paged KV pool a check's engine-shaped calls hold a rank "
                              "through each forward on a GPU (absorbed path; --pool-rows R, --requests B and "
                              "--kv-cache-dtype as the checks take them; docs/checks.md, \"Engine-shaped calls\").")
    p.add_argument("--model", default="glm-5.2", choices=list(PRESETS))
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--experts", type=int, default=None)
    p.add_argument("--tokens", type=int, default=4096, help="prompt length of the activation estimate")
    p.add_argument("--gpu-gib", type=float, default=141.0, help="memory of one GPU (H200: 141)")
    p.add_argument("--weights", default="bf16", choices=["bf16", "fp8"],
                   help="bf16 (default): every weight in bf16; fp8: the weights a GLM-5.x FP8 checkpoint stores in "
                        "FP8 held resident as e4m3 codes and 128 x 128 block scales, each module's dequantised just in "
                        "time (the checks' --weights fp8): per rank the codes, the scales, the bf16 tensors, the "
                        "transient bf16 buffer and the activations")
    add_engine_options(p, chunk=False)
    add_kv_cache_option(p)
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    """Every option's own check, each naming its flag (`glmcheck.cli` runs it before any heavy import)."""
    check_layers(ns.layers)
    check_experts(ns.experts)
    check_count(ns.tp, "--tp")
    check_count(ns.tokens, "--tokens")
    check_number(ns.gpu_gib, "--gpu-gib", positive=True)
    check_serving_options(ns.calls, ns.pool_rows, ns.requests, ns.kv_cache_dtype)


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.evaluate import memory_plan

    report = memory_plan(ns.model, tp=ns.tp, layers=ns.layers, experts=ns.experts, tokens=ns.tokens,
                         gpu_gib=ns.gpu_gib, weights=ns.weights, calls=ns.calls, pool_rows=ns.pool_rows,
                         requests=ns.requests, kv_cache_dtype=ns.kv_cache_dtype)
    print(report.render())
    return report.exit_code
