"""Which MMA each compiled kernel uses, and its registers, spills and shared memory (GPU only).

Usage (GPU machine): PYTHONPATH=. python3 scripts/mma_probe.py [--anatomy DIR]
Prints one line per (path, query-tile rows M, tile): wgmma (Hopper warpgroup MMA) or mma.sync,
registers per thread, spilled bytes, shared memory bytes. With --anatomy: only the table tiles,
with counts of the PTX instructions and TTGIR ops that say how the gathers feed the MMAs
(cp.async into shared memory or ld.global through registers, async wgmma and its waits), and
each kernel's TTGIR and PTX written under DIR.
"""

from __future__ import annotations

import os
import re
import sys

import torch

from glmcheck.inputs import random_inputs
from glmcheck.kernels import prefill, tiles
from glmcheck.kernels.prefill import LOG2E
from glmcheck.kernels.union import launch_union_attention, union_dedup
from glmcheck.kernels.validate import check_prefill_args

EXTRA_TILES = [tiles.Tile(32, 8, 2), tiles.Tile(64, 8, 2), tiles.Tile(32, 4, 2), tiles.Tile(16, 4, 2)]


def describe(compiled) -> str:
    ptx = compiled.asm["ptx"]
    mma = "wgmma" if "wgmma.mma_async" in ptx else ("mma.sync" if "mma.sync" in ptx else "no-mma")
    return (f"{mma:8s} regs={getattr(compiled, 'n_regs', '?')} spills={getattr(compiled, 'n_spills', '?')} "
            f"smem={compiled.metadata.shared}")


PTX_MARKERS = ("wgmma.mma_async", "wgmma.wait_group", "mma.sync", "cp.async.cg", "cp.async.ca",
               "cp.async.wait_group", "cp.async.bulk", "ld.global", "st.shared", "ld.shared",
               "stmatrix", "ldmatrix", "bar.sync", "ex2.approx", "ld.local", "st.local")
TTGIR_MARKERS = ("warp_group_dot ", "warp_group_dot_wait", "tt.dot ", "async_copy_global_to_local",
                 "async_wait", "local_alloc", "local_load", "local_store", "tt.load ")


def anatomy(compiled, name: str, out_dir: str) -> str:
    """Counts of PTX instructions / TTGIR ops; writes the two listings under out_dir."""
    ptx, ttgir = compiled.asm["ptx"], compiled.asm["ttgir"]
    os.makedirs(out_dir, exist_ok=True)
    for ext, text in (("ptx", ptx), ("ttgir", ttgir)):
        with open(os.path.join(out_dir, f"{name}.{ext}"), "w") as handle:
            handle.write(text)
    ptx_counts = " ".join(f"{m}={len(re.findall(re.escape(m), ptx))}" for m in PTX_MARKERS)
    ttgir_counts = " ".join(f"{m.strip()}={ttgir.count(m)}" for m in TTGIR_MARKERS)
    return f"\n    ptx: {ptx_counts}\n    ttgir: {ttgir_counts}"


def probe(heads: int, group: int, anatomy_dir: str | None = None) -> None:
    inp = random_inputs(64, heads, 256, 128, 512, 64, device="cuda")
    args = check_prefill_args(inp.q, inp.kv, inp.indices, inp.sm_scale, 512, None)
    out = torch.empty((64, heads, 512), dtype=torch.bfloat16, device="cuda")
    rows = group * heads if group else prefill.head_tile(heads)
    path = "union" if group else "per_token"
    candidates = [tiles.table_tile(path, rows, args.q.device)] + ([] if anatomy_dir else EXTRA_TILES)
    for tile in candidates:
        try:
            if group:
                sets = union_dedup(args.indices, group, num_kv_rows=args.num_kv_rows)
                compiled = launch_union_attention(args, sets, out, tile, False, args.sm_scale * LOG2E)
            else:
                lengths = prefill.effective_lengths(args.indices, None, args.num_kv_rows)
                compiled = prefill.launch_per_token(args, lengths, out, tile, False)
            torch.cuda.synchronize()
            extra = anatomy(compiled, f"{path}_H{heads}_G{group}", anatomy_dir) if anatomy_dir else ""
            print(f"{path:9s} H={heads:3d} G={group} M={rows:3d} {tile}: {describe(compiled)}{extra}", flush=True)
        except Exception as err:  # noqa: BLE001  (an oversized tile is a result here, not a failure)
            print(f"{path:9s} H={heads:3d} G={group} M={rows:3d} {tile}: {type(err).__name__} {str(err)[:120]}")


def main() -> int:
    anatomy_dir = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--anatomy" else None
    shapes = ((8, 0), (64, 0), (8, 4), (16, 2), (8, 8)) if anatomy_dir else \
        ((8, 0), (32, 0), (64, 0), (8, 2), (8, 4), (8, 8), (16, 4), (32, 2))
    for heads, group in shapes:
        probe(heads, group, anatomy_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
