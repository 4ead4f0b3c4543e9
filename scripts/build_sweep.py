"""Union build timing on the GPU: the search, merged-sort (torch.sort or in-register bitonic),
tree and hash builds, their parts, and the whole union path with each build.

Usage (GPU machine): PYTHONPATH=. python3 scripts/build_sweep.py [--seq-len 8192] [--best best.json]
Each build's sets are checked against the merge build (same rows and bits) before timing, and
each whole union path against the fp32 reference (rel-L2 gate) before timing.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys

import torch

from glmcheck import metrics
from glmcheck.bench import D_V, GATE_REL_L2, BenchPoint, make_inputs, time_ms
from glmcheck.inputs import poisoned_out
from glmcheck.kernels import prefill, sparse_mla_prefill
from glmcheck.kernels import union as union_mod
from glmcheck.reference import sparse_mla_reference


HASH = False  # the hash build (run 7: 0.89 / 1.08 / 1.68 ms at G = 2 / 4 / 8, never the fastest)
BITONIC = False  # the in-register sort build (run 7: 1.26 / 2.05 / 2.65 ms, never the fastest)


def same_sets(a: union_mod.UnionSets, b: union_mod.UnionSets) -> bool:
    """Same rows with the same bits in every group, in any order."""
    if not torch.equal(a.lengths, b.lengths):
        return False
    width = int(a.lengths.max())
    mask = torch.arange(width, device=a.rows.device)[None, :] < a.lengths[:, None]
    key_a = torch.where(mask, a.rows[:, :width].long() * 16 + a.bits[:, :width].long(), -1)
    key_b = torch.where(mask, b.rows[:, :width].long() * 16 + b.bits[:, :width].long(), -1)
    return torch.equal(key_a.sort(dim=1).values, key_b.sort(dim=1).values)


def time_parts(indices: torch.Tensor, group: int, kv_rows: int) -> None:
    """Sort alone at the search and merge segment widths."""
    tokens, topk = indices.shape
    keys = torch.where(indices >= 0, indices, torch.full_like(indices, 2**31 - 1))
    wide = keys[: tokens // group * group].reshape(tokens // group, group * topk).contiguous()
    print(f"  torch.sort {list(keys.shape)}: {time_ms(lambda: torch.sort(keys, dim=1)):.3f} ms; "
          f"{list(wide.shape)}: {time_ms(lambda: torch.sort(wide, dim=1)):.3f} ms", flush=True)


@contextlib.contextmanager
def wide_keys():
    """Force the merged-sort build's int32 keys (the narrow int16 keys are the default where they fit)."""
    chosen = union_mod.merge_key_dtype
    union_mod.merge_key_dtype = lambda G, num_kv_rows: torch.int32
    try:
        yield
    finally:
        union_mod.merge_key_dtype = chosen


def sweep_builds(indices: torch.Tensor, kv_rows: int) -> None:
    for group in (2, 4, 8):
        print(f"G={group}", flush=True)
        time_parts(indices, group, kv_rows)
        baseline = union_mod.union_dedup(indices, group, num_kv_rows=kv_rows, method="merge")
        if group <= 4:  # G = 8: the search build's 56 unrolled searches per slot outlast the budget
            ms = time_ms(lambda: union_mod.union_dedup(indices, group, num_kv_rows=kv_rows, method="search"))
            print(f"  search BLOCK={union_mod.BUILD_BLOCK} warps={union_mod.BUILD_WARPS}: {ms:.3f} ms", flush=True)
        keys = union_mod.merge_key_dtype(group, kv_rows)
        time_build(indices, group, kv_rows, baseline, "merge", f"{keys} keys BLOCK={union_mod.MERGE_BLOCK}")
        if keys != torch.int32:
            with wide_keys():
                time_build(indices, group, kv_rows, baseline, "merge", "torch.int32 keys")
        if group == 2:
            for block in (256, 1024):
                union_mod.ANCHOR_BLOCK = block
                time_build(indices, group, kv_rows, baseline, "anchor", f"BLOCK={block}")
            union_mod.ANCHOR_BLOCK = 1024
        if group > 2:
            for block in (256, 1024):
                union_mod.TREE_BLOCK = block
                time_build(indices, group, kv_rows, baseline, "tree", f"BLOCK={block}")
            with wide_keys():
                time_build(indices, group, kv_rows, baseline, "tree", "BLOCK=256 torch.int32 keys at G=2")
            union_mod.TREE_BLOCK = 256
        if BITONIC:
            time_build(indices, group, kv_rows, baseline, "bitonic", f"sort warps={union_mod.BITONIC_WARPS}")
        if HASH:
            time_build(indices, group, kv_rows, baseline, "hash", f"programs/SM={union_mod.HASH_PROGRAMS_PER_SM}")


def time_build(indices: torch.Tensor, group: int, kv_rows: int, baseline: union_mod.UnionSets,
               method: str, label: str) -> None:
    """Check one build's sets against `baseline`, then time it (NaN when they differ)."""
    sets = union_mod.union_dedup(indices, group, num_kv_rows=kv_rows, method=method)
    ok = same_sets(sets, baseline)
    ms = time_ms(lambda: union_mod.union_dedup(indices, group, num_kv_rows=kv_rows, method=method)) \
        if ok else float("nan")
    print(f"  {method} {label}: {'ok' if ok else 'MISMATCH'} {ms:.3f} ms", flush=True)


def sweep_union_paths(seq_len: int) -> dict[str, dict[str, str]]:
    """Whole union path (build + attention + tail) per build method, gated against fp32 first.
    Returns the fastest build per heads and G: {"8": {"2": "merge", ...}, ...}."""
    real = prefill.build_union_sets
    best: dict[str, dict[str, str]] = {}
    for heads, group in ((8, 2), (8, 4), (8, 8), (16, 2), (16, 4)):
        x = make_inputs(BenchPoint(1, seq_len, heads), seed=7)
        ref = sparse_mla_reference(x.q, x.kv, x.indices, x.sm_scale, D_V, dtype=torch.float32)
        run = functools.partial(sparse_mla_prefill, x.q, x.kv, x.indices, x.sm_scale, D_V, union=group)
        base = run(union=0)
        times: dict[str, float] = {}
        print(f"H={heads} G={group}: per-token {time_ms(lambda: run(union=0)):.3f} ms", flush=True)
        methods = ("search", "merge", "tree", "anchor") + (("bitonic",) if BITONIC else ()) + (("hash",) if HASH else ())
        for method in methods:
            if (method == "search" and group == 8) or (method == "tree" and group == 2) or \
                    (method == "anchor" and group != 2):
                continue
            prefill.build_union_sets = functools.partial(real, method=method)
            out = poisoned_out(x.q.shape[0], heads, D_V, "cuda")
            run(out=out)
            rel = metrics.rel_l2(out, ref)
            vs_token = metrics.rel_l2(out, base)
            ms = time_ms(lambda: run(out=out)) if rel <= GATE_REL_L2 else float("nan")
            print(f"  union{group} build={method}: rel {rel:.3e} (vs per-token {vs_token:.2e}) {ms:.3f} ms",
                  flush=True)
            if ms == ms:
                times[method] = ms
        prefill.build_union_sets = real
        best.setdefault(str(heads), {})[str(group)] = min(times, key=times.get)
    return best


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--best", help="write the fastest build per heads and G here (JSON)")
    parser.add_argument("--builds-only", action="store_true", help="time the builds alone, not the whole paths")
    ns = parser.parse_args()
    x = make_inputs(BenchPoint(1, ns.seq_len, 8), seed=3)
    print(f"calibrated indices 1x{ns.seq_len}, topk {x.indices.shape[-1]}", flush=True)
    sweep_builds(x.indices.reshape(x.indices.shape[0], -1).contiguous(), x.kv.shape[0])
    if ns.builds_only:
        return 0
    best = sweep_union_paths(ns.seq_len)
    print(f"fastest build per heads, G: {best}", flush=True)
    if ns.best:
        with open(ns.best, "w") as handle:
            json.dump(best, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
