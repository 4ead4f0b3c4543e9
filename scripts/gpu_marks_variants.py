"""The marks union build's step sizes, first pass, turn order, warps and programs on the GPU (issue 74: the build is
0.25 of union 4's 1.33 ms at 1 x 8192, H = 16). Each variant's rows and bits are gated against today's marks build
(`gpu_union_builds.canonical`), then timed as graph replays at the bench points, G = 2, 4, 8, calibrated indices.

    python3 scripts/gpu_marks_variants.py [--variants base,2d,...] [--rep-ms 100] [--paired base,NAME --rounds 7]
                                          [--prefill base,NAME]

--prefill A,B: instead, `sparse_mla_prefill` eager (the Python call, its build included) at the union points of
issue 74's bars with the knobs of A and of B, outputs bit for bit equal, paired rounds (B's ms / A's).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_union_builds import canonical, graph_ms

import glmcheck.kernels.union as union_mod
from glmcheck.bench.kernel import capture_graph, paired_ratios, synthetic_indices, time_ms
from glmcheck.bench.names import HEADLINE_POINTS
from glmcheck.kernels.union import union_dedup_forced

VARIANTS = {  # name: the union module's knobs it sets (the rest as on main)
    "base": {},
    "2d": dict(MARKS_PASS_2D=True),
    "w4p2112": dict(MARKS_WARPS=4, MARKS_PROGRAMS=2112),
    "2d-w4p2112": dict(MARKS_PASS_2D=True, MARKS_WARPS=4, MARKS_PROGRAMS=2112),
    "atom": dict(MARKS_ATOMIC=True),
    "atom-m512": dict(MARKS_ATOMIC=True, MARKS_MARK_BLOCK=512),
    "atom-2d": dict(MARKS_ATOMIC=True, MARKS_PASS_2D=True),
    "atom-2d-w4p2112": dict(MARKS_ATOMIC=True, MARKS_PASS_2D=True, MARKS_WARPS=4, MARKS_PROGRAMS=2112),
    "atom-2d-w4p2112-m512": dict(MARKS_ATOMIC=True, MARKS_PASS_2D=True, MARKS_WARPS=4, MARKS_PROGRAMS=2112,
                                 MARKS_MARK_BLOCK=512),
    "atom-2d-p2112": dict(MARKS_ATOMIC=True, MARKS_PASS_2D=True, MARKS_PROGRAMS=2112),
}


@contextlib.contextmanager
def knobs(name: str):
    saved = {k: getattr(union_mod, k) for k in VARIANTS[name]}
    for k, v in VARIANTS[name].items():
        setattr(union_mod, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(union_mod, k, v)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rep-ms", type=int, default=100)
    parser.add_argument("--paired", default="")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--prefill", default="")
    ns = parser.parse_args()
    if ns.prefill:
        prefill_pairs(ns)
        return
    names = ns.variants.split(",")
    print("| point | G | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    pairs = []
    for batch, seq_len in HEADLINE_POINTS:
        indices = synthetic_indices("calibrated", [seq_len] * batch, 2048, seed=0).cuda()
        kv_rows = batch * seq_len
        for G in (2, 4, 8):
            call = functools.partial(union_dedup_forced, indices, G, num_kv_rows=kv_rows, method="marks")
            expected = canonical(call())
            cells = []
            for name in names:
                with knobs(name):
                    got = canonical(call())
                    ok = torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
                    cells.append(f"{graph_ms(call, ns.rep_ms):.4f}" if ok else "DIFFERS")
            print(f"| {batch}x{seq_len} | {G} | " + " | ".join(cells) + " |", flush=True)
            if ns.paired:
                replays = []
                for name in ns.paired.split(","):
                    with knobs(name):
                        replays.append(capture_graph(call)[0])
                pairs.append((f"{batch}x{seq_len}", G, sorted(paired_ratios(replays[1], replays[0], ns.rounds,
                                                                              time_ms, max(10, ns.rep_ms // 4)))))
    if pairs:
        first, second = ns.paired.split(",")
        print(f"\n| point | G | {second} / {first} (median) | range | rounds |")
        print("|---|---|---|---|---|")
        for point, G, r in pairs:
            print(f"| {point} | {G} | {r[len(r) // 2]:.3f} | {r[0]:.3f}-{r[-1]:.3f} | {len(r)} |")


PREFILL_POINTS = ((1, 8192, 16, 4), (1, 8192, 32, 2), (1, 8192, 8, 8), (1, 2048, 16, 4), (4, 2048, 8, 8))


def prefill_pairs(ns) -> None:
    """`--prefill A,B` (module docstring)."""
    from glmcheck.bench.kernel import BenchPoint, make_inputs
    from glmcheck.kernels import sparse_mla_prefill

    first, second = ns.prefill.split(",")
    print(f"| point | union | {first} ms | {second} ms | {second} / {first} (median) | range | rounds | bits equal |")
    print("|---|---|---|---|---|---|---|---|")
    for batch, seq_len, heads, G in PREFILL_POINTS:
        x = make_inputs(BenchPoint(batch, seq_len, heads))
        calls, outs = [], []
        for name in (first, second):
            def call(name=name, x=x, G=G):
                with knobs(name):
                    return sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, topk_length=x.topk_length, union=G)
            outs.append(call())
            calls.append(call)
        equal = torch.equal(outs[0], outs[1])
        ms = [time_ms(c, rep_ms=ns.rep_ms) for c in calls]
        r = sorted(paired_ratios(calls[1], calls[0], ns.rounds, time_ms, ns.rep_ms))
        print(f"| {batch}x{seq_len} H={heads} | {G} | {ms[0]:.3f} | {ms[1]:.3f} | {r[len(r) // 2]:.3f} | "
              f"{r[0]:.3f}-{r[-1]:.3f} | {len(r)} | {equal} |", flush=True)


if __name__ == "__main__":
    main()
