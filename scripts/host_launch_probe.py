"""Eager, graph and host cost of one union prefill call with each 64-row tile (diagnostic; GPU,
seconds).

Usage (H200): PYTHONPATH=. python3 scripts/host_launch_probe.py [--seq-len 2048] [--heads 8 --union 8]
For each tile ("split", "pingpong"): the output is gated against the fp32 reference, then three
times are printed: eager median (triton do_bench, the Python call included), CUDA-graph replay
median (GPU time alone) and host microseconds per call (back-to-back calls, no synchronisation,
averaged). Eager above graph means the host, not the GPU, sets the eager time.
"""

from __future__ import annotations

import argparse
import functools
import time

import torch

from glmcheck import metrics
from glmcheck.bench import D_V, GATE_REL_L2, BenchPoint, make_inputs, time_ms
from glmcheck.kernels import prefill, sparse_mla_prefill
from glmcheck.kernels.union_ws_launch import WsConfig, launch_union_attention_ws
from glmcheck.reference import sparse_mla_reference


def graph_ms(fn) -> float:
    """Median ms of a CUDA-graph replay of fn (captured after one eager warm-up call)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return time_ms(graph.replay)


def host_us(fn, calls: int = 200) -> float:
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--union", type=int, default=8, help="G, with G * heads = 64")
    ns = parser.parse_args()
    x = make_inputs(BenchPoint(1, ns.seq_len, ns.heads), seed=3)
    reference = sparse_mla_reference(x.q, x.kv, x.indices, x.sm_scale, D_V, dtype=torch.float32)
    out = torch.empty_like(x.q[..., :D_V])
    real = prefill.launch_union_attention_ws
    for tile in ("split", "pingpong"):
        prefill.launch_union_attention_ws = functools.partial(launch_union_attention_ws, config=WsConfig(tile=tile))
        try:
            call = functools.partial(sparse_mla_prefill, x.q, x.kv, x.indices, x.sm_scale, D_V, out=out,
                                     union=ns.union)
            out.fill_(float("nan"))
            call()
            rel = metrics.rel_l2(out, reference)
            if not rel <= GATE_REL_L2:
                print(f"{tile}: gate failed (rel-L2 {rel:.3e})", flush=True)
                return 1
            print(f"1x{ns.seq_len} H={ns.heads} union {ns.union}, {tile} tile: eager {time_ms(call):.3f} ms, graph {graph_ms(call):.3f} ms, "
                  f"host {host_us(call):.0f} us/call (rel-L2 {rel:.2e})", flush=True)
        finally:
            prefill.launch_union_attention_ws = real
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
