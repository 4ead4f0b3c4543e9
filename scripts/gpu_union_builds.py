"""Union builds on the GPU (issue 43, item 2): every method's rows and bits gated against the merge build, then
timed eager (the Python call, launches included) and as a CUDA-graph replay (GPU time alone), at the H = 8 bench
points, G = 2, 4, 8, on calibrated and random-walk (drift10, drift2) indices. Prints one table.

    python3 scripts/gpu_union_builds.py [--modes calibrated,drift10,drift2] [--rep-ms 100] [--methods marks,merge]
                                        [--paired marks,merge --rounds 7]

--methods: the builds timed (default marks, the auto before marks and, at G = 2, merge); --paired A,B
adds a table of paired rounds: A and B alternately as graph replays, B's ms / A's per round (median, range).
"""

from __future__ import annotations

import argparse
import functools
import time

import torch
import triton.testing

from glmcheck.bench.kernel import synthetic_indices
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
    ns = parser.parse_args()
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
                    pairs.append((mode, f"{batch}x{seq_len}", G, paired_ratios(indices, G, kv_rows, ns)))
            print(f"<!-- {mode} {batch}x{seq_len}: {time.time() - started:.1f} s -->", flush=True)
    if pairs:
        first, second = ns.paired.split(",")
        print(f"\n| indices | point | G | {second} / {first} (median) | range | rounds |")
        print("|---|---|---|---|---|---|")
        for mode, point, G, ratios in pairs:
            ratios.sort()
            print(f"| {mode} | {point} | {G} | {ratios[len(ratios) // 2]:.3f} | {ratios[0]:.3f}-{ratios[-1]:.3f} | "
                  f"{len(ratios)} |", flush=True)


def paired_ratios(indices, G: int, kv_rows: int, ns) -> list[float]:
    """B's graph-replay ms over A's, one ratio per round, A and B alternating (ns.paired = "A,B")."""
    first, second = (functools.partial(union_dedup_forced, indices, G, num_kv_rows=kv_rows, method=m)
                     for m in ns.paired.split(","))
    rep = max(10, ns.rep_ms // 4)
    return [graph_ms(second, rep) / graph_ms(first, rep) for _ in range(ns.rounds)]


if __name__ == "__main__":
    main()
