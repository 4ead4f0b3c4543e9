"""GPU run 32, call 5: where the eager time of the small H = 8 points goes. For each call of the bench at
1 x 2048 and 1 x 8192, H = 8 (calibrated indices, the bench's inputs): the host's enqueue time per call (N calls
back to back, no sync), the GPU time per call (CUDA-graph replay), the do_bench eager median (L2 flushed before
each call, as the bench times it), and the kernels each call launches (torch.profiler). Prints one table per point.
Usage: python3 host_cost.py [N]   (needs a GPU; FlashMLA through GLMCHECK_FLASHMLA_LIB)."""
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from glmcheck.bench.kernel import (BenchPoint, capture_graph, default_specs, make_inputs, time_ms,
                                   union_dedup)
from glmcheck.backends.registry import flashmla_available

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
NAMES = ("per-token+len", "union8+len", "union8+len+plan", "flashmla+len")


def enqueue_us(fn, n: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    return host / n * 1e6


def launches(fn) -> list[str]:
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type.name == "CUDA"]


for label in ("1x2048:8", "1x8192:8"):
    batch_len, heads = label.split(":")
    batch, seq_len = map(int, batch_len.split("x"))
    point = BenchPoint(batch, seq_len, int(heads))
    x = make_inputs(point)
    out = torch.empty(x.q.shape[0], x.q.shape[1], 512, dtype=x.q.dtype, device=x.q.device)
    specs = {s.name: s for s in default_specs(flashmla_available()[0])}
    calls = {name: (lambda s=specs[name]: s.run(x, out)) for name in NAMES if name in specs}
    calls["build8"] = lambda: union_dedup(x.indices, 8, num_kv_rows=x.kv.shape[0]).rows
    print(f"\n{point.label}: host enqueue us/call (N={N}), GPU us/call (graph replay), eager do_bench us, kernels launched")
    print("| call | host enqueue us | GPU us (graph) | eager do_bench us | kernels | names |")
    print("|---|---|---|---|---|---|")
    for name, fn in calls.items():
        fn()
        host = enqueue_us(fn, N)
        replay, _ = capture_graph(fn)
        gpu = time_ms(replay) * 1e3
        eager = time_ms(fn) * 1e3
        try:
            names = launches(fn)
        except Exception as err:  # noqa: BLE001  (the timings matter more than the listing)
            names = [f"profiler failed: {type(err).__name__}"]
        short = ", ".join(sorted({n[:40] for n in names}))
        print(f"| {name} | {host:.1f} | {gpu:.1f} | {eager:.1f} | {len(names)} | {short} |", flush=True)
