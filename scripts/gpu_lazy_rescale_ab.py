"""The ping-pong tile's lazy running max (issue 74, item 2: tile work at 16-128 heads) against today's tile, on the
GPU: gated, then paired rounds of CUDA-graph replays.

    python3 scripts/gpu_lazy_rescale_ab.py [--points 1x8192:64,...] [--rounds 7] [--rep-ms 100]

At each point and path (the per-token path from 17 heads; union 8 / 4 / 2 at 8 / 16 / 32 heads, their plan built
outside the timed call), both forms run on NaN-poisoned outputs against the fp32 reference (rel-L2 within the bench's
gate) and against each other (the largest difference, in bf16 ulps of the output's top magnitude: not bit-equal, the
P values are taken against another max). Then `rounds` paired rounds (the order alternating), ms of the lazy form /
ms of today's. Prints one table; exit 1 when a gate fails. `--points` as `glmcheck bench --points`.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.bench.kernel import (
    GATE_REL_L2,
    REFERENCE_BUDGET_BYTES,
    capture_graph,
    make_inputs,
    paired_ratios,
    parse_points,
    time_ms,
)
from glmcheck.checks.metrics import rel_l2
from glmcheck.kernels import plan_sparse_mla, sparse_mla_prefill
from glmcheck.kernels.gluon import constants

DEFAULT_POINTS = "1x8192:64,1x2048:64,1x8192:128,1x2048:128,1x8192:96,1x8192:8,1x8192:16,1x8192:32,1x2048:16"
UNION_BY_HEADS = {8: 8, 16: 4, 32: 2}  # the union whose G * H is the ping-pong tile's 64 rows


def forward(inputs, plan, lazy: bool):
    """() -> out for one form of the tile (the flag is read at launch, so a captured graph keeps its form)."""
    def call() -> torch.Tensor:
        constants.PINGPONG_LAZY_RESCALE = lazy
        out = torch.full(inputs.q.shape[:2] + (512,), float("nan"), dtype=torch.bfloat16, device=inputs.q.device)
        return sparse_mla_prefill(inputs.q, inputs.kv, inputs.indices, inputs.sm_scale, 512, out=out,
                                  topk_length=inputs.topk_length, plan=plan)
    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default=DEFAULT_POINTS)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rep-ms", type=int, default=100)
    ns = parser.parse_args()
    failed = False
    print("| point | path | rel-L2 today | rel-L2 lazy | max diff / ulp | today ms | lazy / today (median) | range |")
    print("|---|---|---|---|---|---|---|---|")
    for point in parse_points(ns.points):
        inputs = make_inputs(point)
        union = UNION_BY_HEADS.get(point.heads, 0)
        plan = plan_sparse_mla(inputs.indices, num_kv_rows=inputs.kv.shape[0], num_heads=point.heads,
                               topk_length=inputs.topk_length, union=union)
        reference = sparse_mla_reference(inputs.q, inputs.kv, inputs.indices, inputs.sm_scale, 512,
                                         topk_length=inputs.topk_length, dtype=torch.float32,
                                         budget_bytes=REFERENCE_BUDGET_BYTES)
        today, lazy = forward(inputs, plan, False)(), forward(inputs, plan, True)()
        rels = [rel_l2(out, reference) for out in (today, lazy)]
        ulp = torch.finfo(torch.bfloat16).eps * 2.0 ** torch.floor(torch.log2(reference.abs().max())).item()
        diff = (today.float() - lazy.float()).abs().max().item() / ulp
        path = f"union{union}+len+plan" if union else "per-token+len"
        if not all(r <= GATE_REL_L2 for r in rels):  # NaN (an unwritten output) fails too
            failed = True
            print(f"| {point.label} | {path} | {rels[0]:.3e} | {rels[1]:.3e} | {diff:.1f} | gate failed | - | - |")
            continue
        graphs = [capture_graph(forward(inputs, plan, flag))[0] for flag in (False, True)]
        today_ms = time_ms(graphs[0], rep_ms=ns.rep_ms)
        ratios = [1 / r for r in paired_ratios(graphs[0], graphs[1], ns.rounds, time_ms, ns.rep_ms)]
        print(f"| {point.label} | {path} | {rels[0]:.3e} | {rels[1]:.3e} | {diff:.1f} | {today_ms:.3f} | "
              f"{statistics.median(ratios):.3f} | {min(ratios):.3f}-{max(ratios):.3f} |", flush=True)
    constants.PINGPONG_LAZY_RESCALE = False
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
