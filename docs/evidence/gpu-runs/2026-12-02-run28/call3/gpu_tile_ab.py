"""Which 64-row Gluon tile per union group (issue 43, item 1): the ping-pong tile against the split tile where G * H =
64 at G = 2 and 4 (H = 32 and 16) and 8 (H = 8); docs/performance.md, "Which 64-row tile per group". Each point: one plan (the marks build) outside
the timed calls; both tiles gated against the fp32 reference on a NaN-poisoned output; then paired rounds,
alternating which tile runs first. Prints one table (ratio < 1: ping-pong faster).

    PYTHONPATH=. python3 docs/gpu-runs/2026-12-02-run28/call3/gpu_tile_ab.py [--rounds 7] [--rep-ms 100]

The question it asked is settled (ping-pong runs every group) and the split tile has left main (after run 29); it
stays beside its log as the record and runs at commits up to 24a03b1.
"""

from __future__ import annotations

import argparse
import statistics

import torch

import glmcheck.kernels.gluon.launch as launch
from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.bench.kernel import D_V, GATE_REL_L2, BenchPoint, make_inputs, paired_ratios, time_ms
from glmcheck.checks import metrics
from glmcheck.data.inputs import poisoned_out
from glmcheck.kernels import plan_sparse_mla, sparse_mla_prefill

POINTS = [(1, 8192, 16, 4), (1, 8192, 32, 2), (4, 2048, 16, 4), (1, 2048, 16, 4), (1, 8192, 8, 8)]  # B, N, H, G
TILE_GROUPS = {"pingpong": (1, 2, 4, 8), "split": (1,)}  # PINGPONG_GROUPS under each arm (G = 1: the per-token path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rep-ms", type=int, default=100)
    parser.add_argument("--mode", default="calibrated")
    ns = parser.parse_args()
    default_groups = launch.PINGPONG_GROUPS
    print("| point | G | ping-pong ms | split ms | paired pp/split median (min-max) | gates rel-L2 pp / split |")
    print("|---|---|---|---|---|---|")
    for batch, seq_len, heads, group in POINTS:
        x = make_inputs(BenchPoint(batch, seq_len, heads), mode=ns.mode)
        plan = plan_sparse_mla(x.indices, num_kv_rows=x.kv.shape[0], num_heads=heads, topk_length=x.topk_length,
                               union=group)
        reference = sparse_mla_reference(x.q, x.kv, x.indices, x.sm_scale, D_V, dtype=torch.float32)
        calls, rels = {}, {}
        for arm, groups in TILE_GROUPS.items():
            out = poisoned_out(x.q.shape[0], heads, D_V, x.q.device)

            def call(_groups=groups, _out=out):
                launch.PINGPONG_GROUPS = _groups
                return sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, out=_out, topk_length=x.topk_length,
                                          plan=plan)

            rels[arm] = metrics.rel_l2(call(), reference)
            calls[arm] = call if rels[arm] <= GATE_REL_L2 else None
        label = f"{batch}x{seq_len} H={heads}"
        if None in calls.values():
            print(f"| {label} | {group} | - | - | gate failed | {rels['pingpong']:.3e} / {rels['split']:.3e} |")
            continue
        ms = {arm: time_ms(c, rep_ms=ns.rep_ms) for arm, c in calls.items()}
        ratios = paired_ratios(calls["pingpong"], calls["split"], ns.rounds, time_ms, ns.rep_ms)
        print(f"| {label} | {group} | {ms['pingpong']:.3f} | {ms['split']:.3f} | {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f}) | {rels['pingpong']:.3e} / {rels['split']:.3e} |", flush=True)
    launch.PINGPONG_GROUPS = default_groups


if __name__ == "__main__":
    main()
