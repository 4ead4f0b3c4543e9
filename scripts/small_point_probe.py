"""Why does union 8 at 1 x 2048 time slower in `glmcheck bench` than alone? (GPU diagnostic)

Usage (H200): PYTHONPATH=. python3 scripts/small_point_probe.py [--profile]
Prints the host (enqueue) microseconds per call of the union 8 path and its parts as well.
With --launch it only times one Triton launch three ways (JIT dispatch, compiled runner, raw launcher).
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
        "device_capability (cached)": lambda: device_capability(x.q.device),
        "torch.cuda.get_device_capability": lambda: torch.cuda.get_device_capability(x.q.device),
    }
    for _ in range(3):
        for fn in parts.values():
            fn()
    for round_index in range(2):
        for name, fn in parts.items():
            print(f"host round {round_index} {name}: {host_us(fn):.1f} us/call", flush=True)


def launch_paths() -> None:
    """Host microseconds of one Triton launch (the union key pass at 1x2048) three ways: the JIT
    dispatch (kernel[grid](...)), the compiled kernel's runner (compiled[grid](*all_args)), and
    its raw launcher (compiled.run(...)); each checked to write the same keys."""
    from glmcheck.kernels.union_merge import union_keys_kernel

    x = make_inputs(BenchPoint(1, 2048, 8), seed=0)
    tokens, topk = x.indices.shape
    grid = (tokens, 2)
    args = (x.indices, x.indices, None, x.kv.shape[0], topk, x.indices.stride(0), x.indices.stride(1))
    consts = {"G": 2, "HAS_LENGTH": False, "BLOCK": 1024, "EMPTY": 32767}
    outputs = [torch.full((tokens, topk), -3, dtype=torch.int16, device="cuda") for _ in range(3)]
    with_out = lambda keys: args[:2] + (keys,) + args[3:]
    compiled = union_keys_kernel[grid](*with_out(outputs[0]), **consts)
    runner = compiled[grid]
    stream = torch.cuda.current_stream().cuda_stream
    full = lambda keys: with_out(keys) + tuple(consts.values())
    paths = {
        "jit dispatch kernel[grid](...)": lambda keys: union_keys_kernel[grid](*with_out(keys), **consts),
        "compiled[grid](*args)": lambda keys: runner(*full(keys)),
        "compiled.run(...)": lambda keys: compiled.run(grid[0], grid[1], 1, stream, compiled.function,
                                                      compiled.packed_metadata, None, None, None, *full(keys)),
    }
    for (name, launch), keys in zip(paths.items(), outputs):
        try:
            launch(keys)
            torch.cuda.synchronize()
            same = torch.equal(keys, outputs[0])
            print(f"launch {name}: {host_us(lambda: launch(keys)):.1f} us/call, keys equal {same}", flush=True)
        except Exception as err:  # an experiment: print and go on
            print(f"launch {name}: failed: {type(err).__name__}: {err}", flush=True)
    print(f"torch.Tensor.add_ (one elementwise launch): {host_us(lambda: outputs[0].add_(0)):.1f} us/call", flush=True)

def main() -> None:
    if "--launch" in sys.argv:
        launch_paths()
        return
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
    if "--profile" in sys.argv:
        profile_host_time()


if __name__ == "__main__":
    main()
