"""Print the H200's ceilings for docs/performance.md: copy rate, bf16 matmul, gather floor per point.

Usage (GPU machine): PYTHONPATH=. python3 scripts/ceilings.py
"""

from __future__ import annotations

import sys

from glmcheck.bench import REFERENCE_POINTS, BenchPoint
from glmcheck.ceilings import copy_tb_per_s, gather_floor, matmul_tflops
from glmcheck.tables import markdown_table


def main() -> int:
    print(f"HBM copy: {copy_tb_per_s():.2f} TB/s (read + write); bf16 8192^3 matmul: {matmul_tflops():.0f} TFLOP/s")
    rows = []
    for batch, seq_len in REFERENCE_POINTS:
        floor = gather_floor(BenchPoint(batch, seq_len, 8))
        rows.append([floor.point, f"{floor.gigabytes:.2f}", f"{floor.ms:.3f}", f"{floor.tb_per_s:.2f}"])
    print(markdown_table(["point", "row bytes read (GB)", "gather-only ms (floor)", "TB/s"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
