"""`glmcheck plan`: memory needed per GPU for a preset and TP degree, before loading anything."""

from __future__ import annotations

import argparse

from glmcheck.evaluate.arguments import check_count, check_experts, check_layers, check_number
from glmcheck.model.presets import PRESETS
from glmcheck.records.tables import markdown_table


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="memory per GPU for a preset at a TP degree (printed before loading)",
                       description="Per-rank weights (exact, from the module shapes and the sharding rules) and a "
                                   "conservative activation estimate for one prefill, on the absorbed path and on "
                                   "transformers' dense hf_sdpa / hf_eager paths, with the largest --layers and "
                                   "--tokens that fit.")
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
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    """Every option's own check, each naming its flag (`glmcheck.cli` runs it before any heavy import)."""
    check_layers(ns.layers)
    check_experts(ns.experts)
    check_count(ns.tp, "--tp")
    check_count(ns.tokens, "--tokens")
    check_number(ns.gpu_gib, "--gpu-gib", positive=True)


LABELS = {"absorbed": "absorbed (every swapped backend)", "hf_sdpa": "hf_sdpa (dense)", "hf_eager": "hf_eager (dense)"}


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.model.memory import HEADROOM, PATHS, plan_memory
    from glmcheck.model.presets import make_config

    precheck(ns)
    weights = getattr(ns, "weights", "bf16")
    config = make_config(ns.model, layers=ns.layers, experts=ns.experts)
    try:
        plans = [plan_memory(config, ns.tp, ns.tokens, ns.gpu_gib, path, weights) for path in PATHS]
    except ValueError as err:  # the shard check names the library's argument: "tp 3 must divide ..."
        if str(err).startswith(f"tp {ns.tp} "):
            raise ValueError(f"--{err} of {ns.model}") from None
        raise
    if weights == "fp8":
        print(markdown_table(
            ["preset", "layers", "tp", "attention", "params total", "params / rank", "FP8 codes", "scales",
             "bf16 tensors", "weights / rank", "transient", f"activations @{ns.tokens}", "total / rank",
             f"fits {ns.gpu_gib:g} GiB", "max layers that fit", "max tokens that fit"],
            [_lead(ns.model, plan) + [f"{plan.codes_gib:.1f} GiB", f"{plan.scales_gib:.2f} GiB",
                                  f"{plan.dense_gib:.1f} GiB", f"{plan.weights_gib_per_rank:.1f} GiB",
                                  f"{plan.transient_gib:.1f} GiB"] + _tail(plan) for plan in plans]))
        print(f"FP8 weights resident: the tensors a GLM-5.x FP8 checkpoint stores in FP8 as e4m3 codes (1 byte) "
              f"and fp32 128 x 128 block scales, the rest (embeddings, lm_head, norms, router, indexer) in bf16 "
              f"(router fp32); transient: the largest module's weights dequantised to bf16 at once (an MoE layer's "
              f"two expert stacks) and its fp32 workspace; {_common(HEADROOM)}")
    else:
        print(markdown_table(
            ["preset", "layers", "tp", "attention", "params total", "params / rank", "weights / rank",
             f"activations @{ns.tokens}", "total / rank", f"fits {ns.gpu_gib:g} GiB", "max layers that fit",
             "max tokens that fit"],
            [_lead(ns.model, plan) + [f"{plan.weights_gib_per_rank:.1f} GiB"] + _tail(plan) for plan in plans]))
        print(f"bf16 weights (router fp32); {_common(HEADROOM)}")
    return 0 if plans[0].fits else 1


def _lead(model: str, plan) -> list:
    return [model, plan.layers, plan.tp, LABELS[plan.path], f"{plan.params_total / 1e9:.1f} B",
            f"{plan.params_per_rank / 1e9:.2f} B"]


def _tail(plan) -> list:
    return [f"{plan.activations_gib:.1f} GiB", f"{plan.total_gib_per_rank:.1f} GiB", "yes" if plan.fits else "no",
            plan.max_layers, f"{plan.max_tokens:,}"]


def _common(headroom: float) -> str:
    return (f"activations: a conservative estimate of one prefill's peak, linear in the length on the absorbed path "
            f"(chunked indexer), quadratic on the dense hf_* paths; 'fits' allows {headroom:.0%} of the GPU; the exit "
            f"status follows the absorbed row. Per torchrun rank: one process emulating --tp (no torchrun) holds "
            f"every weight and head, as --tp 1 shows")
