"""Kernel timing table on the GPU (correctness-gated), as committed in docs/performance.md.

Usage (GPU machine): PYTHONPATH=. python3 scripts/gpu_bench.py [--quick] [--json FILE]
Set GLMCHECK_FLASHMLA_LIB=.flashmla/_flashmla_C.abi3.so to include FlashMLA.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from glmcheck.backends import flashmla_available
from glmcheck.bench import REFERENCE_POINTS, BenchPoint, default_specs, render_table, run_point


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--extra-heads", default="16,32,64")
    ns = parser.parse_args()
    have_flash, source = flashmla_available()
    print(f"FlashMLA: {source}" if have_flash else f"FlashMLA absent: {source}", flush=True)
    specs = default_specs(have_flash)
    points = [BenchPoint(b, n, 8) for b, n in REFERENCE_POINTS]
    points += [BenchPoint(1, 8192, int(h)) for h in ns.extra_heads.split(",") if h]
    results = []
    for point in points:
        chosen = specs if point.heads == 8 else [s for s in specs if s.name != "torch_bf16"]
        part = run_point(point, chosen, quick=ns.quick)
        for r in part:
            print(f"  {r.point.label:16s} {r.backend:13s} ms={r.ms} rel={r.rel_l2} {r.note}", flush=True)
        results += part
    print()
    print(render_table(results))
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump([dataclasses.asdict(r) for r in results], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
