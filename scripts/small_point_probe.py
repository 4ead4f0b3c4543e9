"""Why does union 8 at 1 x 2048 time slower in `glmcheck bench` than alone? (GPU diagnostic)

Usage (H200): PYTHONPATH=. python3 scripts/small_point_probe.py [--profile]
Prints the host (enqueue) microseconds per call of the union 8 path and its parts as well.
Times union 8 at 1x2048, H = 8 three ways on the bench's own inputs (seed 0 and 3): the bench's
call (sparse_mla_prefill), the union path without the public wrapper (prefill._run_union), and
the build alone, each twice (100 and 40 ms of repetitions). With --profile it then prints where
the host time of 50 calls goes (torch.profiler, CPU and CUDA activity, by self CPU time).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch

from glmcheck.bench import D_V, BenchPoint, make_inputs, time_ms
from glmcheck.inputs import poisoned_out
from glmcheck.kernels import prefill, sparse_mla_prefill, union, union_dedup
from glmcheck.kernels.union_ws_launch import launch_union_attention_ws
from glmcheck.kernels.validate import PrefillArgs


def profile_host_time(calls: int = 50) -> None:
    """torch.profiler table of 50 union 8 calls at 1x2048, H = 8: host time per operation."""
    from torch.profiler import ProfilerActivity, profile

    x = make_inputs(BenchPoint(1, 2048, 8), seed=0)
    out = poisoned_out(2048, 8, D_V, "cuda")
    run = lambda: sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, out=out, union=8)
    for _ in range(5):
        run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), flush=True)


def host_us(fn: Callable[[], object], calls: int = 200, batch: int = 10) -> float:
    """Mean host (enqueue) microseconds of fn(): batches of `batch` calls are timed with
    perf_counter and the GPU is synchronised between batches, outside the timed region, so
    the launch queue never fills and the GPU's speed does not enter."""
    total = 0.0
    for _ in range(calls // batch):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        total += time.perf_counter() - start
    torch.cuda.synchronize()
    return 1e6 * total / (calls // batch * batch)


def host_breakdown() -> None:
    """Host microseconds per call of the union 8 path at 1x2048, H = 8, its parts and some
    primitives; twice, interleaved, since this host's speed changes over time (note 25)."""
    from glmcheck.kernels.prefill import stream_is_capturing
    from glmcheck.kernels.union_ws_launch import device_capability
    from glmcheck.kernels.validate import check_prefill_args

    x = make_inputs(BenchPoint(1, 2048, 8), seed=0)
    out = poisoned_out(2048, 8, D_V, "cuda")
    args = PrefillArgs(x.q, x.kv, x.indices, None, x.sm_scale, D_V)
    sets = union_dedup(x.indices, 8, num_kv_rows=x.kv.shape[0])
    keys, _ = union._sorted_keys(x.indices, None, x.kv.shape[0], 2)
    public = lambda G: sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, out=out, union=G)
    parts = {
        "sparse_mla_prefill union=8": lambda: public(8),
        "sparse_mla_prefill union=8, tree levels in two launches": lambda: with_two_launches(lambda: public(8)),
        "sparse_mla_prefill union=2": lambda: public(2),
        "sparse_mla_prefill per-token": lambda: public(0),
        "build_union_sets G=8 (tree)": lambda: union.build_union_sets(x.indices, 8, None, x.kv.shape[0]),
        "build_union_sets G=2 (anchor)": lambda: union.build_union_sets(x.indices, 2, None, x.kv.shape[0]),
        "_sorted_keys G=2 (keys kernel + torch.sort)": lambda: union._sorted_keys(x.indices, None, x.kv.shape[0], 2),
        "torch.sort of the G=2 keys": lambda: torch.sort(keys, dim=1),
        "Gluon attention launch": lambda: launch_union_attention_ws(args, sets, out, x.sm_scale, False),
        "_empty_sets (3 torch.empty)": lambda: union._empty_sets(256, 8, 2048, x.q.device),
        "torch.empty": lambda: torch.empty(1024, dtype=torch.int32, device=x.q.device),
        "torch.zeros": lambda: torch.zeros(1024, dtype=torch.int32, device=x.q.device),
        "check_prefill_args": lambda: check_prefill_args(x.q, x.kv, x.indices, x.sm_scale, D_V, None),
        "stream_is_capturing": lambda: stream_is_capturing(x.q.device),
        "device_capability (cached)": lambda: device_capability(x.q.device),
        "torch.cuda.get_device_capability": lambda: torch.cuda.get_device_capability(x.q.device),
    }
    for _ in range(3):
        for fn in parts.values():
            fn()
    for round_index in range(2):
        for name, fn in parts.items():
            print(f"host round {round_index} {name}: {host_us(fn):.1f} us/call", flush=True)


def with_two_launches(fn: Callable[[], object]) -> object:
    """fn() with the G = 8 tree merges in two launches (the layout before TREE_TWO_LEVELS)."""
    union.TREE_TWO_LEVELS = False
    try:
        return fn()
    finally:
        union.TREE_TWO_LEVELS = True


def gpu_time_two_levels() -> None:
    """GPU time of the union 8 path and its build, tree merges in one launch vs two (1x2048, 1x8192)."""
    for tokens in (2048, 8192):
        x = make_inputs(BenchPoint(1, tokens, 8), seed=0)
        out = poisoned_out(tokens, 8, D_V, "cuda")
        ref = sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, union=8)
        path = lambda: sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, out=out, union=8)
        build = lambda: union.build_union_sets(x.indices, 8, None, x.kv.shape[0])
        one = union.build_union_sets(x.indices, 8, None, x.kv.shape[0])
        two = with_two_launches(build)
        same = torch.equal(one.lengths, two.lengths) and all(
            torch.equal(one.rows[g, :n], two.rows[g, :n]) and torch.equal(one.bits[g, :n], two.bits[g, :n])
            for g, n in enumerate(one.lengths.tolist()))
        path()
        print(f"1x{tokens} union 8: sets equal {same}, outputs bitwise equal {torch.equal(out, ref)}", flush=True)
        for _ in range(2):
            print(f"  one launch: path {time_ms(path):.3f} ms, build {time_ms(build):.3f}; two launches: path "
                  f"{with_two_launches(lambda: time_ms(path)):.3f}, build {with_two_launches(lambda: time_ms(build)):.3f}",
                  flush=True)

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
    host_breakdown()
    gpu_time_two_levels()
    if "--profile" in sys.argv:
        profile_host_time()


if __name__ == "__main__":
    main()
