"""One kernel call for a profiler (Nsight Compute): the ping-pong tile or the marks union build at a bench point,
its inputs as the bench makes them, the call run twice (a warm-up, then the call to profile: `ncu --launch-skip 1
--launch-count 1 -k regex:NAME`). The tile's call takes a plan built before, so the tile is the call's only launch.

    python3 scripts/gpu_profile_call.py tile 1x8192:64     (per-token from 17 heads, union 8 / 4 / 2 at 8 / 16 / 32)
    python3 scripts/gpu_profile_call.py build 1x8192:16    (the union build the tile's union takes there)

Prints the tile's rel-L2 against fp32 (a NaN-poisoned output first), so a profile is of a call that passed its gate.
"""

from __future__ import annotations

import argparse
import sys

import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.bench.kernel import GATE_REL_L2, REFERENCE_BUDGET_BYTES, make_inputs, parse_points
from glmcheck.checks.metrics import rel_l2
from glmcheck.kernels import plan_sparse_mla, sparse_mla_prefill

UNION_BY_HEADS = {8: 8, 16: 4, 32: 2}  # the union whose G * H is the ping-pong tile's 64 rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("tile", "build"))
    parser.add_argument("point", help="a bench point, e.g. 1x8192:64")
    ns = parser.parse_args()
    (point,) = parse_points(ns.point)
    inputs = make_inputs(point)
    union = UNION_BY_HEADS.get(point.heads, 0)

    def plan():
        return plan_sparse_mla(inputs.indices, num_kv_rows=inputs.kv.shape[0], num_heads=point.heads,
                               topk_length=inputs.topk_length, union=union)

    if ns.what == "build":
        for _ in range(2):
            plan()
        torch.cuda.synchronize()
        print(f"{point.label}: union {union} build run twice")
        return 0
    ready = plan()
    outs = [torch.full(inputs.q.shape[:2] + (512,), float("nan"), dtype=torch.bfloat16, device="cuda")
            for _ in range(2)]
    for out in outs:
        sparse_mla_prefill(inputs.q, inputs.kv, inputs.indices, inputs.sm_scale, 512, out=out,
                           topk_length=inputs.topk_length, plan=ready)
    torch.cuda.synchronize()
    reference = sparse_mla_reference(inputs.q, inputs.kv, inputs.indices, inputs.sm_scale, 512,
                                     topk_length=inputs.topk_length, dtype=torch.float32,
                                     budget_bytes=REFERENCE_BUDGET_BYTES)
    rel = rel_l2(outs[1], reference)
    path = f"union{union}+len+plan" if union else "per-token+len+plan"
    print(f"{point.label} {path}: rel-L2 {rel:.3e} against fp32 ({'passed' if rel <= GATE_REL_L2 else 'FAILED'})")
    return 0 if rel <= GATE_REL_L2 else 1


if __name__ == "__main__":
    sys.exit(main())
