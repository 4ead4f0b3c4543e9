"""Union builds on the GPU (issue 43, item 2): every method's rows and bits gated against the merge build, then
timed eager (the Python call, launches included) and as a CUDA-graph replay (GPU time alone), at the H = 8 bench
points, G = 2, 4, 8, on calibrated and random-walk (drift10, drift2) indices. Prints one table.

    python3 scripts/gpu_union_builds.py [--modes calibrated,drift10,drift2] [--rep-ms 100] [--methods marks,merge]
                                        [--paired marks,merge --rounds 7]

--methods: the builds timed (default marks, the auto before marks and, at G = 2, merge); --paired A,B
adds a table of paired rounds: A and B alternately as graph replays, B's ms / A's per round (median, range).
--phases: instead, where the marks build's time goes, from its inputs alone (the kernel unchanged), as graph replays
on calibrated indices: every slot empty (the table's zeroing and the pass that finds each token's count and range),
one valid slot a token (+ G marks and a scan of the group's span), a hole above each token's lowest row (no group
takes the prefix guard: + every mark and scan), and the indices as they are.
"""

from __future__ import annotations

import argparse
import functools
import time

import torch
import triton.testing

from glmcheck.bench.kernel import capture_graph, paired_ratios, synthetic_indices, time_ms
from glmcheck.bench.names import HEADLINE_POINTS
from glmcheck.kernels.union import union_dedup_forced

INT32_MAX = 2**31 - 1


def canonical(sets) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ascending (past each length: INT32_MAX) and their bits (0), whatever order a build wrote them in."""
    width = sets.rows.shape[1]
    live = torch.arange(width, device=sets.rows.device)[None, :] < sets.lengths[:, None]
    rows = torch.where(live, sets.rows, INT32_MAX)
    order = rows.argsort(dim=1)
    return rows.gather(1, order), torch.where(live, sets.bits.int(), 0).gather(1, order)


def graph_ms(fn, rep_ms: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return triton.testing.do_bench(graph.replay, warmup=25, rep=rep_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="calibrated,drift10,drift2")
    parser.add_argument("--rep-ms", type=int, default=100)
    parser.add_argument("--methods", default="", help="comma-separated builds (default: see above)")
    parser.add_argument("--paired", default="", help="A,B: paired rounds of two builds after the table")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--phases", action="store_true", help="the marks build's phases (see above)")
    ns = parser.parse_args()
    if ns.phases:
        phases(ns.rep_ms)
        return
    pairs = []
    print("| indices | point | G | method | gate | eager ms | graph ms |")
    print("|---|---|---|---|---|---|---|")
    for mode in ns.modes.split(","):
        for batch, seq_len in HEADLINE_POINTS:
            started = time.time()
            indices = synthetic_indices(mode, [seq_len] * batch, 2048, seed=0).cuda()
            kv_rows = batch * seq_len
            for G in (2, 4, 8):
                old_auto = "tree" if G > 2 else "anchor"  # "auto" before the marks build
                expected = canonical(union_dedup_forced(indices, G, num_kv_rows=kv_rows, method="merge"))
                methods = (ns.methods.split(",") if ns.methods
                           else ["marks", old_auto] + (["merge"] if G == 2 else []))
                for method in methods:
                    call = functools.partial(union_dedup_forced, indices, G, num_kv_rows=kv_rows, method=method)
                    got = canonical(call())
                    ok = torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
                    eager = triton.testing.do_bench(call, warmup=25, rep=ns.rep_ms) if ok else float("nan")
                    graph = graph_ms(call, ns.rep_ms) if ok else float("nan")
                    print(f"| {mode} | {batch}x{seq_len} | {G} | {method} | {'ok' if ok else 'DIFFERS'} | "
                          f"{eager:.4f} | {graph:.4f} |", flush=True)
                if ns.paired:
                    pairs.append((mode, f"{batch}x{seq_len}", G, paired(indices, G, kv_rows, ns)))
            print(f"<!-- {mode} {batch}x{seq_len}: {time.time() - started:.1f} s -->", flush=True)
    if pairs:
        first, second = ns.paired.split(",")
        print(f"\n| indices | point | G | {second} / {first} (median) | range | rounds |")
        print("|---|---|---|---|---|---|")
        for mode, point, G, ratios in pairs:
            ratios.sort()
            print(f"| {mode} | {point} | {G} | {ratios[len(ratios) // 2]:.3f} | {ratios[0]:.3f}-{ratios[-1]:.3f} | "
                  f"{len(ratios)} |", flush=True)


def phases(rep_ms: int) -> None:
    """The marks build's graph-replay ms on inputs that leave out its later phases (module docstring)."""
    print("| point | G | empty slots | one slot a token | no prefix groups | as they are |")
    print("|---|---|---|---|---|---|")
    for batch, seq_len in HEADLINE_POINTS:
        indices = synthetic_indices("calibrated", [seq_len] * batch, 2048, seed=0).cuda()
        kv_rows = batch * seq_len
        valid = indices >= 0
        first_valid = valid.int().argmax(dim=1, keepdim=True)
        one_slot = torch.where(torch.arange(indices.shape[1], device="cuda")[None, :] == first_valid, indices, -1)
        # dropping each token's highest row breaks every exact prefix (count == high - low + 1 no longer holds for
        # a token with 2+ rows... unless the rest is still a range: drop the lowest instead where that keeps one)
        highest = torch.where(valid, indices, -1).max(dim=1, keepdim=True).values
        lowest = torch.where(valid, indices, 2**31 - 1).min(dim=1, keepdim=True).values
        # a hole above each token's lowest row: no token of 3+ rows selects a range, so no group takes the guard
        no_prefix = torch.where((indices == lowest + 1) & (highest > lowest + 1), -1, indices)
        cells = []
        for G in (2, 4, 8):
            row = [graph_ms(functools.partial(union_dedup_forced, x, G, num_kv_rows=kv_rows, method="marks"), rep_ms)
                   for x in (torch.full_like(indices, -1), one_slot, no_prefix, indices)]
            cells.append(f"| {batch}x{seq_len} | {G} | " + " | ".join(f"{ms:.4f}" for ms in row) + " |")
        print("\n".join(cells), flush=True)


def paired(indices, G: int, kv_rows: int, ns) -> list[float]:
    """B's graph-replay ms over A's, one ratio per round, the order alternating (ns.paired = "A,B";
    `glmcheck.bench.kernel.paired_ratios`)."""
    first, second = (capture_graph(functools.partial(union_dedup_forced, indices, G, num_kv_rows=kv_rows,
                                                     method=m))[0] for m in ns.paired.split(","))
    return list(paired_ratios(second, first, ns.rounds, time_ms, max(10, ns.rep_ms // 4)))


if __name__ == "__main__":
    main()
