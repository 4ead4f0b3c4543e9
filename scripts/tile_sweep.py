"""Tile sweep on the GPU: every (BLOCK_N, warps, stages) candidate per kernel path, gated first.

Usage (GPU machine): PYTHONPATH=. python3 scripts/tile_sweep.py [--out FILE.json]
Prints the best tile per (path, heads, union G) at 1 x 8192, topk 2048.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import torch

from glmcheck import metrics
from glmcheck.bench import BenchPoint, D_V, make_inputs, time_ms
from glmcheck.inputs import poisoned_out
from glmcheck.kernels import sparse_mla_prefill, tiles
from glmcheck.kernels.tiles import Tile
from glmcheck.reference import sparse_mla_reference

CONFIGS = [("per_token", 8, 0), ("per_token", 16, 0), ("per_token", 32, 0), ("per_token", 64, 0),
           ("union", 8, 2), ("union", 8, 4), ("union", 16, 2)]
CANDIDATES = [Tile(n, w, s) for n, w, s in itertools.product((16, 32, 64), (4, 8), (2, 3))] + \
             [Tile(32, 4, 1), Tile(32, 2, 2), Tile(64, 4, 4)]


def parse_tiles(text: str) -> list[Tile]:
    """'64/4/3,128/4/1' -> tiles (BLOCK_N/warps/stages)."""
    return [Tile(*map(int, item.split("/"))) for item in text.split(",") if item]


def sweep(seq_len: int, configs=CONFIGS, candidates=CANDIDATES) -> list[dict]:
    rows = []
    for path, heads, group in configs:
        point = BenchPoint(1, seq_len, heads)
        x = make_inputs(point, seed=heads + group)
        ref = sparse_mla_reference(x.q, x.kv, x.indices, x.sm_scale, D_V, dtype=torch.float32)
        for tile in candidates:
            tiles.clear_fitted_tiles()
            out = poisoned_out(x.q.shape[0], heads, D_V, "cuda")
            try:
                sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, out=out, union=group, _tile=tile)
            except Exception as err:  # noqa: BLE001
                rows.append(dict(path=path, heads=heads, group=group, tile=str(tile), error=repr(err)[:200]))
                continue
            key = tiles.memo_key(path, heads, group, out.device)
            stepped = tiles.fitted_tile(key)
            rel = metrics.rel_l2(out, ref)
            row = dict(path=path, heads=heads, group=group, block_n=tile.block_n, num_warps=tile.num_warps,
                       num_stages=tile.num_stages, rel_l2=rel, stepped_down=str(stepped) if stepped else "")
            if rel <= 3e-3 and not stepped:
                row["ms"] = time_ms(lambda: sparse_mla_prefill(
                    x.q, x.kv, x.indices, x.sm_scale, D_V, out=out, union=group, _tile=tile), rep_ms=40)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--out", default=None)
    parser.add_argument("--tiles", default=None, help="BLOCK_N/warps/stages list, e.g. 64/4/3,128/4/1")
    parser.add_argument("--configs", default=None, help="path:heads:G list, e.g. per_token:8:0,union:8:2")
    ns = parser.parse_args()
    configs = CONFIGS if not ns.configs else \
        [(p, int(h), int(g)) for p, h, g in (c.split(":") for c in ns.configs.split(","))]
    candidates = CANDIDATES if not ns.tiles else parse_tiles(ns.tiles)
    rows = sweep(ns.seq_len, configs, candidates)
    if ns.out:
        with open(ns.out, "w") as f:
            json.dump(rows, f, indent=1)
    print("\nbest tile per config (1 x %d, topk 2048):" % ns.seq_len)
    for path, heads, group in configs:
        timed = [r for r in rows if r.get("ms") and (r["path"], r["heads"], r["group"]) == (path, heads, group)]
        timed.sort(key=lambda r: r["ms"])
        top = ", ".join(f"{r['block_n']}/{r['num_warps']}/{r['num_stages']}={r['ms']:.3f}" for r in timed[:4])
        print(f"  {path:9s} H={heads:3d} G={group}: {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
