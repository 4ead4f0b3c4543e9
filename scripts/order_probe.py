"""Longest-first schedule vs token order, and (per-token) the loop bound found by the kernel vs
the host's effective_lengths (GPU, about two minutes; H200 run 11: docs/performance.md notes 36-37).

Usage (H200): PYTHONPATH=. python3 scripts/order_probe.py [--rounds 3]
At the five H = 8 reference points (and 1x8192 at H = 16) it checks that the per-token path and
the 64-row union path (union 8 at H = 8, union 4 at H = 16) give bitwise equal outputs with the
attention kernels' programs in token order and in reverse (longest prefill rows first), then
times both orders' CUDA-graph replays in alternating rounds (GPU time only; do_bench median).
Predicted: in token order the last programs hold the longest tokens. A per-token program of
2048 rows lasts ~135 us (0.25 ns per row over 132 SMs, two programs per SM), so SMs finish up to
that far apart and idle meanwhile; longest-first leaves the short programs for the end. Saving:
up to ~half a long program per SM, i.e. ~5-10 % at 1x2048, ~3 % at 1x4096, ~1-2 % at 1x8192,
2x4096 and 4x2048 (enough for per-token to pass FlashMLA+len where it is 1-3 % behind).
"""

from __future__ import annotations

import argparse

import torch

from glmcheck.bench import D_V, BenchPoint, capture_graph, make_inputs, time_ms
from glmcheck.inputs import poisoned_out
from glmcheck.kernels import prefill, sparse_mla_prefill
from glmcheck.kernels.runtime import schedule

POINTS = [(1, 2048, 8), (1, 4096, 8), (1, 8192, 8), (2, 4096, 8), (4, 2048, 8), (1, 8192, 16)]


def capture_variant(x, heads: int, union: int, longest_first: bool, kernel_bound: bool) -> tuple:
    """(replay, output) of one path with the given schedule and loop-bound switches."""
    schedule["longest_first"] = longest_first
    prefill.KERNEL_FINDS_BOUND = kernel_bound
    out = poisoned_out(x.q.shape[0], heads, D_V, "cuda")
    try:
        return capture_graph(lambda: sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, out=out, union=union))
    finally:
        schedule["longest_first"], prefill.KERNEL_FINDS_BOUND = True, True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    ns = parser.parse_args()
    for batch, seq_len, heads in POINTS:
        x = make_inputs(BenchPoint(batch, seq_len, heads), seed=0)
        for union in (0, 64 // heads):
            bounds = (False, True) if union == 0 else (True,)  # the union path has no per-token bound
            variants = {(order, bound): capture_variant(x, heads, union, order, bound)
                        for order in (False, True) for bound in bounds}
            for replay, output in variants.values():
                output.fill_(float("nan"))
                replay()
            torch.cuda.synchronize()
            outputs = [output for _, output in variants.values()]
            same = all(torch.equal(outputs[0], other) for other in outputs[1:])
            times = {key: [] for key in variants}
            for _ in range(ns.rounds):
                for key, (replay, _) in variants.items():
                    times[key].append(time_ms(replay))
            best = {key: min(values) for key, values in times.items()}
            base = best[(False, False)] if union == 0 else best[(False, True)]
            cells = ", ".join(f"{'longest-first' if order else 'token order'}"
                              f"{' + kernel bound' if bound and union == 0 else ''} {ms:.3f} ms ({base / ms:.3f}x)"
                              for (order, bound), ms in best.items())
            label = "per-token (vs token order, host bound)" if not union else f"union{union}"
            print(f"{batch}x{seq_len} H={heads} {label}: {cells}; outputs bitwise equal: {same}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
