"""The shape-only faults' verdict rates (docs/reliability.md, "Engine-shaped calls: shape-only faults"): each fault of
`glmcheck.selftest.shape_faults` over seeds, with one-shot calls (`--calls prefill`: right, so PASS) and with the
engine's (`--calls serving`: FAIL), beside the kernel they wrap on the CPU (reference:bf16). Prints the rates tables.

    python scripts/shape_fault_rates.py [--model ref-cpu] [--seeds 20] [--tokens 64] [--checks layer0,logits]

The legitimate kernels' false alarms under `--calls serving`, and every other planted fault there, are
`glmcheck selftest --model ref-cpu --calls serving`'s run.
"""

from __future__ import annotations

import argparse
import sys

import glmcheck.kernels  # noqa: F401  (the interpreter on a machine without CUDA)
from glmcheck.model.engine_shape import EngineShape
from glmcheck.selftest.rates import measure_rates, rates_table
from glmcheck.selftest.shape_faults import SHAPE_FAULTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ref-cpu")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--checks", default="layer0,logits")
    ns = parser.parse_args(argv)
    checks = [c for c in ns.checks.split(",") if c]
    for calls, engine in (("prefill", None), ("serving", EngineShape())):
        tallies = measure_rates(ns.model, range(ns.seeds), ns.tokens, checks, engine=engine, faults=list(SHAPE_FAULTS),
                                legitimate=["reference:bf16"],
                                progress=lambda line, calls=calls: print(f"{calls}: {line}", file=sys.stderr,
                                                                         flush=True))
        print(f"--calls {calls}: shape-only faults on {ns.model}, {ns.tokens} tokens, seeds 0..{ns.seeds - 1}")
        print(rates_table(tallies) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
