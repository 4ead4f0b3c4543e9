"""Alternating A/B timing of two bench backends at one point, for verdicts that a single median
cannot settle (two paths within a few percent, e.g. per-token against FlashMLA+len at H = 64).

Usage (GPU machine): PYTHONPATH=. python3 scripts/paired_timing.py [--point 1x8192:16]
    [--pair per-token union2] [--timing eager|graph] [--rounds 7] [--build METHOD]
--pair names two backends of `glmcheck.bench.default_specs` (FlashMLA's when it loads).
--build forces the union build method (as `union_dedup(method=...)` names them) instead of "auto".
Both backends are gated against the fp32 reference on poisoned outputs first (each spec's own
gate; with --timing graph the replay's output is poisoned and gated too, as in `glmcheck bench`);
then each round times A, then B (median of do_bench, 300 ms each), and the table gives every
round's pair and the median ratio over the rounds. Exit status 1 when a gate fails.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable

import torch
from accuracy_fp64 import parse_point  # scripts/ is on sys.path

from glmcheck.backends import flashmla_available
from glmcheck.bench import (
    D_V,
    TIMINGS,
    BenchSpec,
    PointInputs,
    capture_graph,
    default_specs,
    gated_call,
    make_inputs,
    time_ms,
)
from glmcheck.kernels import union as union_mod
from glmcheck.reference import sparse_mla_reference


def pick_specs(names: list[str], specs: list[BenchSpec]) -> list[BenchSpec]:
    """The specs named by --pair, in its order; ValueError naming --pair and the choices."""
    by_name = {spec.name: spec for spec in specs}
    missing = [name for name in names if name not in by_name]
    if missing or len(names) != 2 or names[0] == names[1]:
        raise ValueError(f"--pair takes two different backends of {sorted(by_name)}; got {names}")
    return [by_name[name] for name in names]


def gated_calls(specs: list[BenchSpec], x: PointInputs, timing: str,
                capture: Callable = capture_graph) -> dict[str, Callable[[], object]] | None:
    """{name: the call to time} once every spec passed its gate (printed), else None."""
    reference = sparse_mla_reference(x.q, x.kv, x.indices, x.sm_scale, D_V, dtype=torch.float32)
    calls = {}
    for spec in specs:
        call, rel, note = gated_call(spec, x, reference, timing, capture)
        print(f"{spec.name}: rel-L2 vs fp32 {rel:.3e}", flush=True)
        if not rel <= spec.gate_rel_l2:
            print(f"{spec.name} failed its gate ({spec.gate_rel_l2}); nothing timed")
            return None
        if call is None:
            print(f"{spec.name}: {note}; nothing timed")
            return None
        calls[spec.name] = call
    return calls


def alternate(calls: dict[str, Callable[[], object]], rounds: int,
              timer: Callable[..., float] = time_ms) -> list[tuple[float, float]]:
    """`rounds` pairs (ms of A, ms of B), A timed first in every round; each pair printed."""
    (a, call_a), (b, call_b) = calls.items()
    print(f"| round | {a} ms | {b} ms | {a}/{b} |\n|---|---|---|---|", flush=True)
    pairs = []
    for round_ in range(rounds):
        t_a, t_b = timer(call_a, rep_ms=300), timer(call_b, rep_ms=300)
        pairs.append((t_a, t_b))
        print(f"| {round_} | {t_a:.3f} | {t_b:.3f} | {t_a / t_b:.3f} |", flush=True)
    ratios = sorted(t_a / t_b for t_a, t_b in pairs)
    print(f"median {a}/{b} over {rounds} rounds: {statistics.median(ratios):.3f} "
          f"(range {ratios[0]:.3f}-{ratios[-1]:.3f}; > 1: {b} faster)", flush=True)
    return pairs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--point", type=parse_point, default=parse_point("1x8192:16"), help="BxS:H")
    parser.add_argument("--pair", nargs=2, default=["per-token", "union2"], metavar=("A", "B"))
    parser.add_argument("--timing", choices=TIMINGS, default="eager")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0, help="the bench's seed (its default: 0)")
    parser.add_argument("--build", help="union build method to force (default: the library's auto choice)")
    ns = parser.parse_args()
    if ns.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {ns.rounds}")
    try:
        specs = pick_specs(ns.pair, default_specs(flashmla_available()[0]))
    except ValueError as err:
        parser.error(str(err))
    if ns.build:
        union_mod.choose_build = lambda G, topk, merge_legal: ns.build
        print(f"union build forced: {ns.build}", flush=True)
    print(f"{ns.point.label}, timing {ns.timing}", flush=True)
    calls = gated_calls(specs, make_inputs(ns.point, seed=ns.seed), ns.timing)
    if calls is None:
        return 1
    alternate(calls, ns.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
