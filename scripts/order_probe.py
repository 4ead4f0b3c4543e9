"""Longest-first schedule vs token order (branch exp/longest-first; GPU, about a minute).

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
from glmcheck.kernels import sparse_mla_prefill
from glmcheck.kernels.runtime import schedule

POINTS = [(1, 2048, 8), (1, 4096, 8), (1, 8192, 8), (2, 4096, 8), (4, 2048, 8), (1, 8192, 16)]


def graphs_by_order(x, heads: int, union: int) -> dict[bool, tuple]:
    """{longest_first: (replay, output)} for one path; outputs compared bitwise."""
    graphs = {}
    for longest_first in (False, True):
        schedule["longest_first"] = longest_first
        out = poisoned_out(x.q.shape[0], heads, D_V, "cuda")
        graphs[longest_first] = capture_graph(
            lambda out=out: sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, out=out, union=union))
    schedule["longest_first"] = True
    return graphs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    ns = parser.parse_args()
    for batch, seq_len, heads in POINTS:
        x = make_inputs(BenchPoint(batch, seq_len, heads), seed=0)
        for union in (0, 64 // heads):
            graphs = graphs_by_order(x, heads, union)
            for replay, output in graphs.values():
                output.fill_(float("nan"))
                replay()
            torch.cuda.synchronize()
            same = torch.equal(graphs[False][1], graphs[True][1])
            times = {False: [], True: []}
            for _ in range(ns.rounds):
                for longest_first in (False, True):
                    times[longest_first].append(time_ms(graphs[longest_first][0]))
            token_order, longest = min(times[False]), min(times[True])
            print(f"{batch}x{seq_len} H={heads} {'per-token' if not union else f'union{union}'}: token order "
                  f"{token_order:.3f} ms, longest first {longest:.3f} ms ({token_order / longest:.3f}x); "
                  f"outputs bitwise equal: {same}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
