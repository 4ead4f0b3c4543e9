"""`memory_plan`: the memory a preset needs per GPU at a TP degree (`glmcheck.model.memory`: weights exact from the
module shapes and the sharding rules, a conservative estimate of one prefill's activations), on the absorbed path and
transformers' dense ones, as a `Report` whose render is the table `glmcheck plan` prints.

Light module (no torch at import): the memory plan is imported when it runs.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from glmcheck.evaluate.arguments import check_count, check_experts, check_layers, check_number
from glmcheck.process.wording import flag

if TYPE_CHECKING:
    from glmcheck.evaluate.report import Report

LABELS = {"absorbed": "absorbed (every swapped backend)", "hf_sdpa": "hf_sdpa (dense)", "hf_eager": "hf_eager (dense)"}
WEIGHT_FORMATS = ("bf16", "fp8")


def memory_plan(model: str = "glm-5.2", *, tp: int = 8, layers: int | None = None, experts: int | None = None,
                tokens: int = 4096, gpu_gib: float = 141.0, weights: str = "bf16") -> Report:
    """Per rank: the weights of preset `model` (`layers`, `experts` overriding its own) held as `weights` (bf16, or
    fp8: FP8 weights resident) at TP degree `tp`, one prefill's activations at `tokens` tokens per path, and whether
    they fit a GPU of `gpu_gib` GiB, with the largest layer count and prompt that do. ValueError naming the argument
    for a bad option (a `tp` that does not divide the model's heads or experts among them). Verdict PASS when the
    absorbed path fits, FAIL otherwise; one row per path."""
    from glmcheck.checks.band import FAIL, PASS
    from glmcheck.evaluate.report import Report
    from glmcheck.model.memory import HEADROOM, PATHS, plan_memory
    from glmcheck.model.presets import PRESETS, make_config

    if model not in PRESETS:
        raise ValueError(f"{flag('model')} must be one of {', '.join(PRESETS)}, got {model!r}")
    check_layers(layers)
    check_experts(experts)
    check_count(tp, flag("tp"))
    check_count(tokens, flag("tokens"))
    check_number(gpu_gib, flag("gpu_gib"), positive=True)
    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"{flag('weights')} must be one of {', '.join(WEIGHT_FORMATS)}, got {weights!r}")
    config = make_config(model, layers=layers, experts=experts)
    try:
        plans = [plan_memory(config, tp, tokens, gpu_gib, path, weights) for path in PATHS]
    except ValueError as err:  # the shard check names the library's argument: "tp 3 must divide ..."
        if str(err).startswith(f"tp {tp} "):
            raise ValueError(f"{flag('tp')} {str(err)[len('tp '):]} of {model}") from None
        raise
    rows = [{**dataclasses.asdict(plan), "total_gib_per_rank": plan.total_gib_per_rank, "fits": plan.fits}
            for plan in plans]
    return Report("plan", PASS if plans[0].fits else FAIL, rows, {"headroom": HEADROOM}, {"preset": model},
                  {"tp": tp, "layers": layers, "experts": experts, "tokens": tokens, "gpu_gib": gpu_gib,
                   "weights": weights}, extra={"table": _text(model, plans, tokens, gpu_gib, weights, HEADROOM)})


def _text(model: str, plans: list, tokens: int, gpu_gib: float, weights: str, headroom: float) -> str:
    """The plan's table and the line under it."""
    from glmcheck.records.tables import markdown_table

    if weights == "fp8":
        table = markdown_table(
            ["preset", "layers", "tp", "attention", "params total", "params / rank", "FP8 codes", "scales",
             "bf16 tensors", "weights / rank", "transient", f"activations @{tokens}", "total / rank",
             f"fits {gpu_gib:g} GiB", "max layers that fit", "max tokens that fit"],
            [_lead(model, plan) + [f"{plan.codes_gib:.1f} GiB", f"{plan.scales_gib:.2f} GiB",
                                   f"{plan.dense_gib:.1f} GiB", f"{plan.weights_gib_per_rank:.1f} GiB",
                                   f"{plan.transient_gib:.1f} GiB"] + _tail(plan) for plan in plans])
        note = (f"FP8 weights resident: the tensors a GLM-5.x FP8 checkpoint stores in FP8 as e4m3 codes (1 byte) "
                f"and fp32 128 x 128 block scales, the rest (embeddings, lm_head, norms, router, indexer) in bf16 "
                f"(router fp32); transient: the largest module's weights dequantised to bf16 at once (an MoE layer's "
                f"two expert stacks) and its fp32 workspace; {_common(headroom)}")
    else:
        table = markdown_table(
            ["preset", "layers", "tp", "attention", "params total", "params / rank", "weights / rank",
             f"activations @{tokens}", "total / rank", f"fits {gpu_gib:g} GiB", "max layers that fit",
             "max tokens that fit"],
            [_lead(model, plan) + [f"{plan.weights_gib_per_rank:.1f} GiB"] + _tail(plan) for plan in plans])
        note = f"bf16 weights (router fp32); {_common(headroom)}"
    return f"{table}\n{note}"


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
