"""Q from registers as S's A operand (Q_TAIL_REGS bits: 1 the odd warpgroup's rope tail, 2 the even one's, 4 n the odd
one's Q[:, 512 - 64 n:512] too) against today's tile
(Q from shared memory), on the GPU: each form gated on a NaN-poisoned output against fp32 and compared with today's
bit for bit, then paired rounds of graph replays (form / today). Issue 74: fewer shared-memory bytes a pair
(docs/performance.md, "Where the ping-pong pair's time goes").

    python3 scripts/gpu_q_tail_ab.py [--points 1x8192:64,...] [--forms 1,5,7] [--rounds 7] [--rep-ms 60]
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

DEFAULT_POINTS = "1x8192:64,1x2048:64,1x8192:128,1x8192:8,1x8192:16,1x8192:32"
UNION_BY_HEADS = {8: 8, 16: 4, 32: 2}


def forward(inputs, plan, form: int):
    """() -> out for one form (read at launch: a captured graph keeps it)."""
    def call() -> torch.Tensor:
        constants.PINGPONG_Q_TAIL_REGS = form
        out = torch.full(inputs.q.shape[:2] + (512,), float("nan"), dtype=torch.bfloat16, device=inputs.q.device)
        result = sparse_mla_prefill(inputs.q, inputs.kv, inputs.indices, inputs.sm_scale, 512, out=out,
                                    topk_length=inputs.topk_length, plan=plan)
        constants.PINGPONG_Q_TAIL_REGS = 0
        return result
    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default=DEFAULT_POINTS)
    parser.add_argument("--forms", default="1,5,7")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rep-ms", type=int, default=60)
    ns = parser.parse_args()
    failed = False
    forms = [int(f) for f in ns.forms.split(",")]
    heads = " | ".join(f"form {f}: equal, form / today | range" for f in forms)
    print(f"| point | path | rel-L2 today | today ms | {heads} |")
    print("|---|---|---|---|" + "---|---|" * len(forms))
    for point in parse_points(ns.points):
        inputs = make_inputs(point)
        union = UNION_BY_HEADS.get(point.heads, 0)
        plan = plan_sparse_mla(inputs.indices, num_kv_rows=inputs.kv.shape[0], num_heads=point.heads,
                               topk_length=inputs.topk_length, union=union)
        reference = sparse_mla_reference(inputs.q, inputs.kv, inputs.indices, inputs.sm_scale, 512,
                                         topk_length=inputs.topk_length, dtype=torch.float32,
                                         budget_bytes=REFERENCE_BUDGET_BYTES)
        outs = [forward(inputs, plan, form)() for form in [0] + forms]
        rels = [rel_l2(out, reference) for out in outs]
        path = f"union{union}+len+plan" if union else "per-token+len"
        if not all(r <= GATE_REL_L2 for r in rels):
            failed = True
            print(f"| {point.label} | {path} | {rels} | gate failed |", flush=True)
            continue
        graphs = [capture_graph(forward(inputs, plan, form))[0] for form in [0] + forms]
        today_ms = time_ms(graphs[0], rep_ms=ns.rep_ms)
        cells = []
        for k in range(1, len(graphs)):
            equal = torch.equal(outs[0], outs[k])
            ratios = [1 / r for r in paired_ratios(graphs[0], graphs[k], ns.rounds, time_ms, ns.rep_ms)]
            cells.append(f"{equal}, {statistics.median(ratios):.3f} | {min(ratios):.3f}-{max(ratios):.3f}")
        print(f"| {point.label} | {path} | {rels[0]:.3e} | {today_ms:.3f} | {' | '.join(cells)} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
