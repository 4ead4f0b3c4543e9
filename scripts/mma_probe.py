"""Which MMA each compiled kernel uses, and its registers, spills and shared memory (GPU only).

Usage (GPU machine): PYTHONPATH=. python3 scripts/mma_probe.py
Prints one line per (path, query-tile rows M, tile): wgmma (Hopper warpgroup MMA) or mma.sync,
registers per thread, spilled bytes, shared memory bytes.
"""

from __future__ import annotations

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


def probe(heads: int, group: int) -> None:
    inp = random_inputs(64, heads, 256, 128, 512, 64, device="cuda")
    args = check_prefill_args(inp.q, inp.kv, inp.indices, inp.sm_scale, 512, None)
    out = torch.empty((64, heads, 512), dtype=torch.bfloat16, device="cuda")
    rows = group * heads if group else prefill.head_tile(heads)
    path = "union" if group else "per_token"
    candidates = [tiles.table_tile(path, rows, args.q.device)] + EXTRA_TILES
    for tile in candidates:
        try:
            if group:
                sets = union_dedup(args.indices, group, num_kv_rows=args.num_kv_rows)
                compiled = launch_union_attention(args, sets, out, tile, False, args.sm_scale * LOG2E)
            else:
                lengths = prefill.effective_lengths(args.indices, None, args.num_kv_rows)
                compiled = prefill.launch_per_token(args, lengths, out, tile, False)
            torch.cuda.synchronize()
            print(f"{path:9s} H={heads:3d} G={group} M={rows:3d} {tile}: {describe(compiled)}", flush=True)
        except Exception as err:  # noqa: BLE001  (an oversized tile is a result here, not a failure)
            print(f"{path:9s} H={heads:3d} G={group} M={rows:3d} {tile}: {type(err).__name__} {str(err)[:120]}")


def main() -> int:
    for heads, group in ((8, 0), (32, 0), (64, 0), (8, 2), (8, 4), (8, 8), (16, 4), (32, 2)):
        probe(heads, group)
    return 0


if __name__ == "__main__":
    sys.exit(main())
