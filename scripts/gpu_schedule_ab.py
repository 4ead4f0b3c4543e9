"""The ping-pong tile's schedule variants against today's (issue 74): `constants.PINGPONG_SCHEDULE` bits (1: a pair's
row numbers loaded one pair ahead in the producer, 2: the odd warpgroup frees 1R before it waits for P0; 3: both).
Today's form is gated against fp32 (NaN-poisoned output); each variant must give today's output bit for bit (it only
moves waits and loads). Graph replays, paired rounds, variant / today.

    python3 scripts/gpu_schedule_ab.py [--points 1x8192:64,...] [--forms 1,2,3] [--rounds 5] [--rep-ms 60]

At each point: the per-token path from 17 heads, union 8 / 4 / 2 at 8 / 16 / 32 heads, plans built outside the timed
call. One table row per point, printed as it ends; exit 1 when a gate fails or a variant's bits differ.
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

DEFAULT_POINTS = "1x8192:64,1x8192:16,1x8192:32,1x8192:8,1x2048:64,1x8192:128"
UNION_BY_HEADS = {8: 8, 16: 4, 32: 2}  # the union whose G * H is the ping-pong tile's 64 rows


def forward(inputs, plan, schedule: int):
    """() -> out for one schedule of the tile (read at launch, so a captured graph keeps it)."""
    def call() -> torch.Tensor:
        constants.PINGPONG_SCHEDULE = schedule
        out = torch.full(inputs.q.shape[:2] + (512,), float("nan"), dtype=torch.bfloat16, device=inputs.q.device)
        result = sparse_mla_prefill(inputs.q, inputs.kv, inputs.indices, inputs.sm_scale, 512, out=out,
                                    topk_length=inputs.topk_length, plan=plan)
        constants.PINGPONG_SCHEDULE = 0
        return result
    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default=DEFAULT_POINTS)
    parser.add_argument("--forms", default="1,2,3")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rep-ms", type=int, default=60)
    ns = parser.parse_args()
    forms = [int(f) for f in ns.forms.split(",")]
    failed = False
    print("| point | path | rel-L2 today | today ms | " + " | ".join(f"form {f} / today | range" for f in forms) + " |")
    print("|---|---|---|---|" + "---|---|" * len(forms))
    for point in parse_points(ns.points):
        inputs = make_inputs(point)
        union = UNION_BY_HEADS.get(point.heads, 0)
        plan = plan_sparse_mla(inputs.indices, num_kv_rows=inputs.kv.shape[0], num_heads=point.heads,
                               topk_length=inputs.topk_length, union=union)
        reference = sparse_mla_reference(inputs.q, inputs.kv, inputs.indices, inputs.sm_scale, 512,
                                         topk_length=inputs.topk_length, dtype=torch.float32,
                                         budget_bytes=REFERENCE_BUDGET_BYTES)
        today = forward(inputs, plan, 0)()
        rel = rel_l2(today, reference)
        path = f"union{union}+len+plan" if union else "per-token+len+plan"
        if not rel <= GATE_REL_L2:  # NaN (an unwritten output) fails too
            failed = True
            print(f"| {point.label} | {path} | {rel:.3e} | gate failed |", flush=True)
            continue
        cells, graphs = [], {0: capture_graph(forward(inputs, plan, 0))[0]}
        for form in forms:
            if not torch.equal(forward(inputs, plan, form)(), today):
                failed = True
                cells.append("bits differ | -")
                continue
            graphs[form] = capture_graph(forward(inputs, plan, form))[0]
        today_ms = time_ms(graphs[0], rep_ms=ns.rep_ms)
        for i, form in enumerate(forms):
            if form not in graphs:
                continue
            ratios = [1 / r for r in paired_ratios(graphs[0], graphs[form], ns.rounds, time_ms, ns.rep_ms)]
            cells.insert(i, f"{statistics.median(ratios):.3f} | {min(ratios):.3f}-{max(ratios):.3f}")
        print(f"| {point.label} | {path} | {rel:.3e} | {today_ms:.3f} | {' | '.join(cells)} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
