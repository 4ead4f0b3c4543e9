"""`glmcheck plan`: memory needed per GPU for a preset and TP degree, before loading anything."""

from __future__ import annotations

import argparse

from glmcheck.commands.options import check_count, check_experts, check_layers, check_number
from glmcheck.model.presets import PRESETS
from glmcheck.records.tables import markdown_table


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="memory per GPU for a preset at a TP degree (printed before loading)",
                       description="Per-rank weights (exact, from the module shapes and the sharding rules) and a "
                                   "rough activation estimate for one prefill, and the largest --layers that fits.")
    p.add_argument("--model", default="glm-5.2", choices=list(PRESETS))
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--experts", type=int, default=None)
    p.add_argument("--tokens", type=int, default=4096, help="prompt length of the activation estimate")
    p.add_argument("--gpu-gib", type=float, default=141.0, help="memory of one GPU (H200: 141)")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    """Every option's own check, each naming its flag (`glmcheck.cli` runs it before any heavy import)."""
    check_layers(ns.layers)
    check_experts(ns.experts)
    check_count(ns.tp, "--tp")
    check_count(ns.tokens, "--tokens")
    check_number(ns.gpu_gib, "--gpu-gib", positive=True)


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.model.plan import HEADROOM, plan_memory
    from glmcheck.model.presets import make_config

    precheck(ns)
    config = make_config(ns.model, layers=ns.layers, experts=ns.experts)
    try:
        plan = plan_memory(config, ns.tp, ns.tokens, ns.gpu_gib)
    except ValueError as err:  # the shard check names the library's argument: "tp 3 must divide ..."
        if str(err).startswith(f"tp {ns.tp} "):
            raise ValueError(f"--{err} of {ns.model}") from None
        raise
    print(markdown_table(
        ["preset", "layers", "tp", "params total", "params / rank", "weights / rank", f"activations @{ns.tokens}",
         "total / rank", f"fits {ns.gpu_gib:g} GiB", "max layers that fit"],
        [[ns.model, plan.layers, plan.tp, f"{plan.params_total / 1e9:.1f} B", f"{plan.params_per_rank / 1e9:.2f} B",
          f"{plan.weights_gib_per_rank:.1f} GiB", f"{plan.activations_gib:.1f} GiB",
          f"{plan.total_gib_per_rank:.1f} GiB", "yes" if plan.fits else "no", plan.max_layers]]))
    print(f"bf16 weights (router fp32); activations are a rough upper estimate of one prefill; "
          f"'fits' allows {HEADROOM:.0%} of the GPU")
    return 0 if plan.fits else 1
