"""The kernel bench's points, index modes and timing modes, without importing torch (the command
line builds `glmcheck bench`'s parser from them before any heavy import)."""

from __future__ import annotations

# (batch, tokens) of the bench's headline table at H = 8 heads, summarised by their own geomean
HEADLINE_POINTS: list[tuple[int, int]] = [(1, 2048), (1, 4096), (1, 8192), (2, 4096), (4, 2048)]
# The table's points: the H = 8 headline points, 1 x 8192 at every head count the contract's tiles
# change at, and 1 x 2048 where the 64-head tile is shortest.
DEFAULT_POINTS = ",".join([f"{b}x{n}:8" for b, n in HEADLINE_POINTS] + [f"1x8192:{h}" for h in (16, 32, 64, 96, 128)]
                          + ["1x2048:64", "1x2048:128"])
INDEX_MODES = ("calibrated", "drift10", "drift2", "uniform")
TIMINGS = ("eager", "graph")
