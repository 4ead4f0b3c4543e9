"""Why does union 8 at 1 x 2048 time slower in `glmcheck bench` than alone? (GPU diagnostic)

Usage (H200): PYTHONPATH=. python3 scripts/small_point_probe.py
Times union 8 at 1x2048, H = 8 three ways on the bench's own inputs (seed 0): the bench's call
(sparse_mla_prefill), the union path without the public wrapper (prefill._run_union), and the
build alone; then the same after the bench's other specs ran at that point (FlashMLA absent).
"""

from __future__ import annotations

import torch

from glmcheck.bench import D_V, BenchPoint, make_inputs, time_ms
from glmcheck.inputs import poisoned_out
from glmcheck.kernels import prefill, sparse_mla_prefill, union_dedup
from glmcheck.kernels.validate import PrefillArgs


def main() -> None:
    for seed in (0, 3):
        x = make_inputs(BenchPoint(1, 2048, 8), seed=seed)
        out = poisoned_out(2048, 8, D_V, "cuda")
        args = PrefillArgs(x.q, x.kv, x.indices, None, x.sm_scale, D_V)
        public = lambda: sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, out=out, union=8)
        inner = lambda: prefill._run_union(args, 8, out, False, None)
        build = lambda: union_dedup(x.indices, 8, num_kv_rows=x.kv.shape[0])
        for rep in (100, 40):
            print(f"seed {seed} rep {rep}: public {time_ms(public, rep_ms=rep):.3f} ms, inner "
                  f"{time_ms(inner, rep_ms=rep):.3f}, build {time_ms(build, rep_ms=rep):.3f}, "
                  f"per-token {time_ms(lambda: sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, out=out), rep_ms=rep):.3f}",
                  flush=True)
        lengths = union_dedup(x.indices, 8, num_kv_rows=x.kv.shape[0]).lengths.float()
        print(f"  union lengths: mean {lengths.mean():.0f}, max {lengths.max():.0f}", flush=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
