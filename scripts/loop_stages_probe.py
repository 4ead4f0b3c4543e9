"""Union loop pipelined by tl.range(num_stages=N) against the launch's num_stages alone.

Usage (GPU machine): PYTHONPATH=. python3 scripts/loop_stages_probe.py
The launch's num_stages pipelines only loads that feed a dot (the KV gather); tl.range's own
num_stages also pipelines the union-row index loads. Each variant's output is gated against the
fp32 reference (poisoned buffer) and must equal the default variant bitwise before it is timed.
"""

from __future__ import annotations

import sys

import torch

from glmcheck import metrics
from glmcheck.bench import D_V, GATE_REL_L2, BenchPoint, make_inputs, time_ms
from glmcheck.inputs import poisoned_out
from glmcheck.kernels import sparse_mla_prefill
from glmcheck.kernels import union as union_mod
from glmcheck.reference import sparse_mla_reference


def main() -> int:
    print("| heads | G | loop stages | rel-L2 | equal to default | ms |")
    print("|---|---|---|---|---|---|")
    for heads, group in ((8, 8), (8, 4), (16, 2)):
        x = make_inputs(BenchPoint(1, 8192, heads), seed=5)
        ref = sparse_mla_reference(x.q, x.kv, x.indices, x.sm_scale, D_V, dtype=torch.float32)
        default = None
        for stages in (0, 2, 3):
            union_mod.UNION_LOOP_STAGES = stages
            out = poisoned_out(x.q.shape[0], heads, D_V, "cuda")
            try:
                sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, union=group, out=out)
            except Exception as err:  # noqa: BLE001 (an oversized variant is a result)
                print(f"| {heads} | {group} | {stages} | {type(err).__name__} | - | - |", flush=True)
                continue
            default = out.clone() if stages == 0 else default
            rel, same = metrics.rel_l2(out, ref), bool(torch.equal(out, default))
            ok = rel <= GATE_REL_L2 and same
            ms = time_ms(lambda: sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, union=group, out=out)) \
                if ok else float("nan")
            print(f"| {heads} | {group} | {stages} | {rel:.3e} | {same} | {ms:.3f} |", flush=True)
    union_mod.UNION_LOOP_STAGES = 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
