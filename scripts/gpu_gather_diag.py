"""Where the ping-pong tile's time goes (issue 74, the tile at 16-128 heads): today's tile against the same tile with
its KV gathers left out (DIAG_GATHER = 1: no copies, the stages hold whatever they held), with every gather
zero-filled (2: the shared-memory writes, no global reads), with a quarter of each piece's columns as 4-byte copies (3:
as many cp.async as today, a quarter of the bytes) and as 16-byte copies (4: a quarter of both; the rope tails as
today). The diagnostics give wrong results: only today's form is gated (NaN-poisoned output against fp32, the bench's
gate). Graph replays, paired rounds.

    python3 scripts/gpu_gather_diag.py [--points 1x8192:64,...] [--forms 1,3,4] [--rounds 5] [--rep-ms 60]

At each point: the per-token path from 17 heads, union 8 / 4 / 2 at 8 / 16 / 32 heads, plans built outside the timed
call. Prints one table (ms today, then each form / today, median and range); exit 1 when today's gate fails.
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
UNION_BY_HEADS = {8: 8, 16: 4, 32: 2}  # the union whose G * H is the ping-pong tile's 64 rows


def forward(inputs, plan, diag: int):
    """() -> out for one form of the tile (the flag is read at launch, so a captured graph keeps its form)."""
    def call() -> torch.Tensor:
        constants.PINGPONG_DIAG_GATHER = diag
        out = torch.full(inputs.q.shape[:2] + (512,), float("nan"), dtype=torch.bfloat16, device=inputs.q.device)
        result = sparse_mla_prefill(inputs.q, inputs.kv, inputs.indices, inputs.sm_scale, 512, out=out,
                                    topk_length=inputs.topk_length, plan=plan)
        constants.PINGPONG_DIAG_GATHER = 0
        return result
    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default=DEFAULT_POINTS)
    parser.add_argument("--forms", default="1,3,4", help="DIAG_GATHER forms against today's, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rep-ms", type=int, default=60)
    ns = parser.parse_args()
    forms = [int(f) for f in ns.forms.split(",")]
    if any(f not in (1, 2, 3, 4) for f in forms):
        parser.error(f"--forms takes DIAG_GATHER forms 1-4, got {ns.forms!r}")
    failed = False
    print("| point | path | rel-L2 today | today ms | " + " | ".join(f"form {f} / today | range" for f in forms) + " |")
    print("|---" * (4 + 2 * len(forms)) + "|")
    for point in parse_points(ns.points):
        inputs = make_inputs(point)
        union = UNION_BY_HEADS.get(point.heads, 0)
        plan = plan_sparse_mla(inputs.indices, num_kv_rows=inputs.kv.shape[0], num_heads=point.heads,
                               topk_length=inputs.topk_length, union=union)
        reference = sparse_mla_reference(inputs.q, inputs.kv, inputs.indices, inputs.sm_scale, 512,
                                         topk_length=inputs.topk_length, dtype=torch.float32,
                                         budget_bytes=REFERENCE_BUDGET_BYTES)
        rel = rel_l2(forward(inputs, plan, 0)(), reference)
        path = f"union{union}+len+plan" if union else "per-token+len"
        if not rel <= GATE_REL_L2:  # NaN (an unwritten output) fails too
            failed = True
            print(f"| {point.label} | {path} | {rel:.3e} | gate failed |" + " - | - |" * len(forms))
            continue
        graphs = {diag: capture_graph(forward(inputs, plan, diag))[0] for diag in [0] + forms}
        today_ms = time_ms(graphs[0], rep_ms=ns.rep_ms)
        cells = []
        for diag in forms:
            ratios = [1 / r for r in paired_ratios(graphs[0], graphs[diag], ns.rounds, time_ms, ns.rep_ms)]
            cells.append(f"{statistics.median(ratios):.3f} | {min(ratios):.3f}-{max(ratios):.3f}")
        print(f"| {point.label} | {path} | {rel:.3e} | {today_ms:.3f} | {' | '.join(cells)} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
