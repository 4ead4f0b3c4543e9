"""Per-token tile x loop-bound source at H = 16 and 32 (GPU, about a minute).

Usage (H200): PYTHONPATH=. python3 scripts/token_tile_probe.py [--rounds 3]
Run 11's bench showed per-token at 1x8192, H = 32 slower than in run 10 (5.36 vs 4.95 ms) once
the kernel finds its own loop bound. Compiled for sm_90a, its table tile 64/4/2 already sat at
255 registers with a 64-byte stack and the in-kernel bound raises that to 96 bytes, while 64/8/2
needs 211 registers and no stack (`scripts/token_compile.py --heads 32`). Predicted: 64/8/2
with the kernel bound at or below run 10's 4.95 ms; H = 16 (213 registers, no stack) unchanged.
Measured (run 11, docs/performance.md note 39): wrong; 64/8/2 7.1-7.4 ms, 64/4/2 best with the
host's lengths (4.88 ms), so only 16-row tiles find their own bound.
Every variant's CUDA-graph replay is gated against the fp32 reference (output poisoned first),
the two bound sources are compared bitwise per tile, and the timings alternate over rounds.
"""

from __future__ import annotations

import argparse

import torch

from glmcheck import metrics
from glmcheck.bench import D_V, BenchPoint, capture_graph, make_inputs, time_ms
from glmcheck.inputs import poisoned_out
from glmcheck.kernels import prefill, sparse_mla_prefill
from glmcheck.kernels.tiles import Tile
from glmcheck.reference import sparse_mla_reference

TILES = {16: [Tile(64, 4, 3), Tile(64, 8, 2), Tile(64, 4, 2)],
         32: [Tile(64, 4, 2), Tile(64, 8, 2), Tile(64, 8, 3), Tile(32, 4, 3), Tile(32, 4, 2), Tile(128, 8, 2)]}
GATE_REL_L2 = 1e-2
DEVICE, SEQ_LEN = "cuda", 8192  # a CPU dry run (interpreter) patches both


def capture_variant(x, heads: int, tile: Tile, kernel_bound: bool) -> tuple:
    """(replay, output) of the per-token path with `tile` and the given loop-bound source."""
    prefill.KERNEL_FINDS_BOUND = kernel_bound
    out = poisoned_out(x.q.shape[0], heads, D_V, DEVICE)
    try:
        return capture_graph(lambda: sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, out=out,
                                                        union=0, _tile=tile))
    finally:
        prefill.KERNEL_FINDS_BOUND = True


def probe_point(heads: int, rounds: int) -> None:
    """Gate, compare and time every (tile, bound) variant at 1 x SEQ_LEN with `heads` heads."""
    x = make_inputs(BenchPoint(1, SEQ_LEN, heads), seed=0, device=DEVICE)
    reference = sparse_mla_reference(x.q, x.kv, x.indices, x.sm_scale, D_V, dtype=torch.float32)
    variants = {(tile, bound): capture_variant(x, heads, tile, bound)
                for tile in TILES[heads] for bound in (False, True)}
    for (tile, bound), (replay, output) in variants.items():
        output.fill_(float("nan"))
        replay()
        rel = metrics.rel_l2(output, reference)
        if not rel <= GATE_REL_L2:
            raise SystemExit(f"H={heads} {tile} kernel_bound={bound}: gate failed, rel-L2 {rel:.3e}")
    for tile in TILES[heads]:
        same = torch.equal(variants[(tile, False)][1], variants[(tile, True)][1])
        print(f"H={heads} {tile.block_n}/{tile.num_warps}/{tile.num_stages}: bounds bitwise equal {same}")
    times = {key: [] for key in variants}
    for _ in range(rounds):
        for key, (replay, _) in variants.items():
            times[key].append(time_ms(replay))
    for (tile, bound), values in times.items():
        print(f"1x{SEQ_LEN} H={heads} per-token tile {tile.block_n}/{tile.num_warps}/{tile.num_stages} "
              f"{'kernel' if bound else 'host'} bound: {min(values):.3f} ms", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    ns = parser.parse_args()
    for heads in (32, 16):
        probe_point(heads, ns.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
