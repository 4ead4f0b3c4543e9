"""Launch tiles per GPU architecture, and the OutOfResources step-down with its memo.

A tile is (BLOCK_N, num_warps, num_stages), keyed by CUDA capability, kernel path and query tile height M
(BLOCK_H per-token, G*H union); (9, 0) was measured on the H200 (docs/performance.md, "Triton tile table"), other
GPUs get DEFAULT_TILE with one warning, the interpreter INTERPRETER_TILE. After OutOfResources the first smaller
tile that fits is remembered per (path, heads, union G, device).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from triton.runtime.errors import OutOfResources

log = logging.getLogger("glmcheck")


@dataclass(frozen=True)
class Tile:
    """Launch parameters of one kernel call: KV rows per step, warps, pipeline stages."""

    block_n: int
    num_warps: int
    num_stages: int


DEFAULT_TILE = Tile(block_n=32, num_warps=4, num_stages=2)
INTERPRETER_TILE = Tile(block_n=32, num_warps=1, num_stages=1)

# capability -> (path, query tile rows M) -> tile. Missing M falls back to the nearest M below.
TILE_TABLE: dict[tuple[int, int], dict[tuple[str, int], Tile]] = {
    # H200 tile sweeps, 1 x 8192, topk 2048 (docs/performance.md, "Triton tile table")
    (9, 0): {
        ("per_token", 16): Tile(block_n=64, num_warps=4, num_stages=3),
        ("per_token", 32): Tile(block_n=64, num_warps=4, num_stages=2),
        ("per_token", 64): Tile(block_n=64, num_warps=8, num_stages=2),
        ("union", 16): Tile(block_n=64, num_warps=4, num_stages=2),
        ("union", 32): Tile(block_n=64, num_warps=4, num_stages=2),
        ("union", 64): Tile(block_n=64, num_warps=8, num_stages=2),  # wgmma; 32/8/2 1.17x slower
    },
}

_warned_capabilities: set[tuple[int, int]] = set()
_fitted_tiles: dict[tuple, Tile] = {}


def table_tile(path: str, block_m: int, device: torch.device) -> Tile:
    """The tuned tile for `path` with a query tile of `block_m` rows on `device`."""
    if device.type != "cuda":
        return INTERPRETER_TILE
    capability = torch.cuda.get_device_capability(device)
    table = TILE_TABLE.get(capability)
    if table is None:
        if capability not in _warned_capabilities:
            _warned_capabilities.add(capability)
            log.warning("glmcheck: no tuned tile for CUDA capability %s; using default tile %s",
                        capability, DEFAULT_TILE)
        return DEFAULT_TILE
    candidates = [m for (p, m) in table if p == path and m <= block_m]
    if not candidates:
        candidates = [min(m for (p, m) in table if p == path)]
    return table[(path, max(candidates))]


def step_down(tile: Tile) -> Tile | None:
    """The next smaller tile to try after OutOfResources, or None when nothing smaller exists: fewer pipeline
    stages (down to 2), then half the rows per step (down to 16), then a single stage, then fewer warps."""
    if tile.num_stages > 2:
        return replace(tile, num_stages=tile.num_stages - 1)
    if tile.block_n > 16:
        return replace(tile, block_n=tile.block_n // 2)
    if tile.num_stages > 1:
        return replace(tile, num_stages=1)
    if tile.num_warps > 1:
        return replace(tile, num_warps=tile.num_warps // 2)
    return None


def memo_key(path: str, num_heads: int, group: int, device: torch.device) -> tuple:
    """Key of the step-down memo: one entry per (path, heads, union group, device)."""
    return (path, num_heads, group, str(device))


def fitted_tile(key: tuple) -> Tile | None:
    """The tile remembered for `key` after a step-down, if any."""
    return _fitted_tiles.get(key)


def clear_fitted_tiles() -> None:
    """Forget every remembered tile (tests use this)."""
    _fitted_tiles.clear()


def launch_with_step_down(key: tuple, first: Tile, launch: Callable[[Tile], None]) -> Tile:
    """Run `launch(tile)`, stepping the tile down on OutOfResources; return the tile that ran. A tile remembered
    for `key` is used instead of `first`. Raises the last OutOfResources when even the smallest tile does not fit."""
    tile = _fitted_tiles.get(key, first)
    while True:
        try:
            launch(tile)
        except OutOfResources as err:
            smaller = step_down(tile)
            if smaller is None:
                raise
            log.info("glmcheck: %s does not fit (%s); stepping down to %s", tile, err, smaller)
            tile = smaller
            continue
        if tile != first or key in _fitted_tiles:
            _fitted_tiles[key] = tile
        return tile
