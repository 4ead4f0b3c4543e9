"""The marks union build's launch shape against today's (issue 74): MARKS_BLOCK (slots or table bytes per step, and the
first pass's [G, BLOCK] block) and MARKS_WARPS, which set its registers per thread and so how many programs an SM holds
(4 at today's 1024 x 4 warps, 114-168 registers at G = 4-8). Each variant's rows, bits and lengths must equal today's;
graph replays, paired rounds, variant / today, at the H = 8 bench points and G = 2, 4, 8, calibrated indices.

    python3 scripts/gpu_marks_launch_ab.py [--variants 512x4,256x4,512x8] [--rounds 5] [--rep-ms 40]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys

import torch

from glmcheck.bench.kernel import capture_graph, paired_ratios, synthetic_indices, time_ms
from glmcheck.bench.names import HEADLINE_POINTS
from glmcheck.kernels import union
from glmcheck.kernels.union import union_dedup_forced


def build(indices, G: int, kv_rows: int, block: int, warps: int):
    """() -> UnionSets of the marks build at one launch shape (read at launch: a captured graph keeps it)."""
    def call():
        saved = union.MARKS_BLOCK, union.MARKS_WARPS
        union.MARKS_BLOCK, union.MARKS_WARPS = block, warps
        try:
            return union_dedup_forced(indices, G, num_kv_rows=kv_rows, method="marks")
        finally:
            union.MARKS_BLOCK, union.MARKS_WARPS = saved
    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="512x4,256x4,512x8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rep-ms", type=int, default=40)
    ns = parser.parse_args()
    variants = [tuple(int(x) for x in v.split("x")) for v in ns.variants.split(",")]
    today = (union.MARKS_BLOCK, union.MARKS_WARPS)
    failed = False
    print(f"| point | G | today {today[0]}x{today[1]} ms | " +
          " | ".join(f"{b}x{w} / today | range" for b, w in variants) + " |")
    print("|---|---|---|" + "---|---|" * len(variants))
    for batch, seq_len in HEADLINE_POINTS:
        indices = synthetic_indices("calibrated", [seq_len] * batch, 2048, seed=0).cuda()
        kv_rows = batch * seq_len
        for G in (2, 4, 8):
            base_call = build(indices, G, kv_rows, *today)
            expected = base_call()
            base = capture_graph(base_call)[0]
            cells = []
            for block, warps in variants:
                call = build(indices, G, kv_rows, block, warps)
                got = call()  # entries past each length are unspecified: compared only below it
                width = expected.rows.shape[1]
                live = torch.arange(width, device="cuda")[None, :] < expected.lengths[:, None]
                ok = torch.equal(got.lengths, expected.lengths) and torch.equal(
                    torch.where(live, got.rows, 0), torch.where(live, expected.rows, 0)) and torch.equal(
                    torch.where(live, got.bits, 0), torch.where(live, expected.bits, 0))
                if not ok:
                    failed = True
                    cells.append("DIFFERS | -")
                    continue
                graph = capture_graph(call)[0]
                ratios = [1 / r for r in paired_ratios(base, graph, ns.rounds, time_ms, ns.rep_ms)]
                cells.append(f"{statistics.median(ratios):.3f} | {min(ratios):.3f}-{max(ratios):.3f}")
            print(f"| {batch}x{seq_len} | {G} | {time_ms(base, rep_ms=ns.rep_ms):.4f} | {' | '.join(cells)} |",
                  flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
