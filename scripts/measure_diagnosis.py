"""The diagnosis's own rates (docs/diagnosis.md, "Measured"): over seeds, how often the findings of a
planted fault's FAIL row name its structure, how often a legitimate row diagnosed as if it had failed gets no finding,
and how small each fault's repro is (`glmcheck.selftest.diagnosis_rates`). CPU, ref-cpu, the faults on band:5.

    python scripts/measure_diagnosis.py [--seeds 20] [--tokens 128] [--no-repro] [--faults NAME,...]
        [--legitimate NAME,...] [--model ref-gpu --device cuda --base triton_sparse_mla]

Prints the table (markdown, with 95 % Wilson intervals), then the pooled rates, then what went unnamed or what a
legitimate row was told. About 20 s a seed at 128 tokens on two cores (the interpreter's per-token and union forwards
most of it).
"""

from __future__ import annotations

import argparse
import sys
import time

from glmcheck.selftest.diagnosis_rates import measure, table, worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--no-repro", action="store_true", help="skip the repros (findings only)")
    parser.add_argument("--faults", default=None, help="comma-separated fault names (default: every planted fault)")
    parser.add_argument("--legitimate", default=None, help="comma-separated legitimate rows (default: the kernel's "
                                                           "per-token and union paths, band:4, band:5)")
    parser.add_argument("--model", default="ref-cpu")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--base", default="band:5", help="the kernel the faults wrap (on a GPU: triton_sparse_mla)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    tallies = measure(range(args.first_seed, args.first_seed + args.seeds), args.tokens, repro=not args.no_repro,
                      only=args.faults.split(",") if args.faults else None,
                      legitimate=args.legitimate.split(",") if args.legitimate else None,
                      progress=lambda line: print(line, file=sys.stderr, flush=True), model=args.model,
                      base=args.base, device=args.device)
    print(table(tallies))
    print()
    print("\n".join(worst(tallies)))
    print(f"\n{args.seeds} seeds x {args.tokens} tokens in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
