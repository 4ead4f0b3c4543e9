"""Alternating A/B timing of the per-token path and one union group at one point, for verdicts
that a single median cannot settle (two paths within a few percent).

Usage (GPU machine): PYTHONPATH=. python3 scripts/paired_timing.py [--heads 16] [--union 2]
    [--seq-len 8192] [--rounds 7] [--build METHOD]
--build forces the union build method (as `union_dedup(method=...)` names them) instead of "auto".
Both paths are gated against the fp32 reference (rel-L2 <= glmcheck.bench.GATE_REL_L2) on
poisoned outputs first; then each round times per-token, then union (median of do_bench, 300 ms
each), and the table gives every round's pair and the median ratio over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from glmcheck import metrics
from glmcheck.bench import D_V, GATE_REL_L2, BenchPoint, make_inputs, time_ms
from glmcheck.inputs import poisoned_out
from glmcheck.kernels import sparse_mla_prefill
from glmcheck.kernels import union as union_mod
from glmcheck.reference import sparse_mla_reference


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--union", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--build", help="union build method to force (default: the library's auto choice)")
    ns = parser.parse_args()
    if ns.build:
        union_mod.choose_build = lambda G, topk, merge_legal: ns.build
        print(f"union build forced: {ns.build}", flush=True)
    x = make_inputs(BenchPoint(1, ns.seq_len, ns.heads), seed=11)
    ref = sparse_mla_reference(x.q, x.kv, x.indices, x.sm_scale, D_V, dtype=torch.float32)
    runs = {}
    for name, group in (("per-token", 0), (f"union{ns.union}", ns.union)):
        out = poisoned_out(x.q.shape[0], ns.heads, D_V, "cuda")
        sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, union=group, out=out)
        rel = metrics.rel_l2(out, ref)
        print(f"{name}: rel-L2 vs fp32 {rel:.3e}", flush=True)
        if not rel <= GATE_REL_L2:
            print(f"{name} failed its gate ({GATE_REL_L2}); nothing timed")
            return 1
        runs[name] = lambda group=group, out=out: sparse_mla_prefill(
            x.q, x.kv, x.indices, x.sm_scale, D_V, union=group, out=out)
    a, b = runs
    print(f"1x{ns.seq_len} H={ns.heads}: | round | {a} ms | {b} ms | {a}/{b} |")
    ratios = []
    for round_ in range(ns.rounds):
        t_a, t_b = time_ms(runs[a], rep_ms=300), time_ms(runs[b], rep_ms=300)
        ratios.append(t_a / t_b)
        print(f"| {round_} | {t_a:.3f} | {t_b:.3f} | {t_a / t_b:.3f} |", flush=True)
    print(f"median {a}/{b} over {ns.rounds} rounds: {statistics.median(ratios):.3f} "
          f"(> 1: {b} faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
