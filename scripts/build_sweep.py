"""Union build timing on the GPU: torch.sort alone, then union_dedup per search block size.

Usage (GPU machine): PYTHONPATH=. python3 scripts/build_sweep.py
Each variant's output is checked against the first variant (same union sets) before timing.
"""

from __future__ import annotations

import sys

import torch

from glmcheck.bench import time_ms
from glmcheck.indices import drifting_indices
from glmcheck.kernels import union as union_mod


def same_sets(a: union_mod.UnionSets, b: union_mod.UnionSets) -> bool:
    if not torch.equal(a.lengths, b.lengths):
        return False
    width = int(a.lengths.max())
    mask = torch.arange(width, device=a.rows.device)[None, :] < a.lengths[:, None]
    key_a = torch.where(mask, a.rows[:, :width].long() * 16 + a.bits[:, :width].long(), -1)
    key_b = torch.where(mask, b.rows[:, :width].long() * 16 + b.bits[:, :width].long(), -1)
    return torch.equal(key_a.sort(dim=1).values, key_b.sort(dim=1).values)


def main() -> int:
    indices = drifting_indices([8192], 2048, 0.10, seed=0).cuda()
    keys = torch.where(indices >= 0, indices, torch.full_like(indices, 2**31 - 1))
    print(f"torch.sort [8192, 2048] int32: {time_ms(lambda: torch.sort(keys, dim=1)):.3f} ms")
    for group in (2, 4):
        baseline = None
        for block, warps in ((256, 4), (1024, 4), (1024, 8), (2048, 8)):
            union_mod.BUILD_BLOCK, union_mod.BUILD_WARPS = block, warps
            sets = union_mod.union_dedup(indices, group, num_kv_rows=8192)
            baseline = baseline or sets
            ok = same_sets(sets, baseline)
            ms = time_ms(lambda: union_mod.union_dedup(indices, group, num_kv_rows=8192)) if ok else float("nan")
            print(f"G={group} BLOCK={block} warps={warps}: {'ok' if ok else 'MISMATCH'} {ms:.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
