"""False alarms and detection of the all-position gate (`glmcheck.checks.position_gate`) on saved per-position KL
(`scripts/position_kl.py`), per row over the seeds, with 95 % Wilson intervals; the same on bins of positions (the
length sweep's). The tables of docs/reliability.md, "All-position logits".

    python scripts/position_gate_rates.py KL.pt [KL.pt ...] [--band 4] [--bins 32,64,128]
        [--skip-seeds 0,1] [--seeds 100,101] [--position-ratio R --neighbours W --exceed-limit L --exceed-slack S
         --median-systematic A --median-sampling B] [--forgive-runs N --run-length L --run-gap G]

The band is band:0..band:N-1 of each seed; legitimate rows: the held-out band variants (band:N..) and the kernel
under test (per-token, unions, any other legitimate row saved); every fault: a detection when it FAILS. With
--bins also the length sweep as a whole: a row PASSes a seed's sweep when no bin FAILS, a fault's onset is its first
bin out, and per seed which legitimate rows were out where. --forgive-runs N judges with a candidate count instead
(`RunForgivingGate`, analysis only: not the product's gate).
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass

import torch

from glmcheck.checks.position_gate import PositionBand, PositionGate
from glmcheck.checks.positions import PositionStatistics
from glmcheck.selftest.rates import wilson


@dataclass(frozen=True)
class RunForgivingGate(PositionGate):
    """A candidate count (analysis only): as `PositionGate`, but the `forgive` largest runs of beyond positions that
    span at most `run_length` positions are not counted (a run: beyond positions at most `run_gap` apart). One
    discrete flip moves a dense run of 16-80 positions (docs/reliability.md, "The sweep's band"); a fault that
    touches 1 token in 64, or every token, moves many runs or one run longer than that."""

    forgive: int = 1
    run_length: int = 128
    run_gap: int = 4

    def measure(self, row: PositionStatistics, band: PositionBand) -> dict[str, float]:
        measures = super().measure(row, band)
        kl = row.distance.double()
        where = (~(kl <= band.allowed(self.position_ratio, self.neighbours))).nonzero().flatten().tolist()
        runs: list[list[int]] = []  # [first, last, count] of each run
        for t in where:
            if runs and t - runs[-1][1] <= self.run_gap:
                runs[-1][1], runs[-1][2] = t, runs[-1][2] + 1
            else:
                runs.append([t, t, 1])
        short = sorted((c for first, final, c in runs if final - first + 1 <= self.run_length), reverse=True)
        beyond = measures["beyond"] - sum(short[:self.forgive])
        positions = kl.numel()
        margin = max(beyond / self.allowed_beyond(positions), measures["median_ratio"] / self.median_limit(positions))
        return measures | {"beyond": beyond, "exceed": beyond / positions, "runs": len(runs),
                           "margin": margin if measures["margin"] != float("inf") else measures["margin"]}


def _stats(entry: dict, start: int = 0, stop: int | None = None) -> PositionStatistics:
    dlogprob = entry.get("dlogprob", entry["kl"]).double()  # the compact records of docs/ keep kl and same_top only
    return PositionStatistics(entry["kl"].double(), entry["same_top"], dlogprob).window(
        start, stop if stop is not None else entry["kl"].numel())


def tally(seeds: dict, gate: PositionGate, band_size: int, start: int = 0, stop: int | None = None) -> dict:
    """{row: [verdicts over seeds]} for every row but the reference and the band."""
    names = [f"band:{k}" for k in range(band_size)]
    out: dict[str, list[str]] = {}
    for rows in seeds.values():
        band = PositionBand.of([_stats(rows[n], start, stop) for n in names], names)
        for name, entry in rows.items():
            if name == "reference" or name in names:
                continue
            out.setdefault(name, []).append(gate.judge(_stats(entry, start, stop), band)[0])
    return out


def table(verdicts: dict, title: str) -> str:
    lines = [title, "| row | kind | FAIL / runs | 95 % interval of the FAIL rate |", "|---|---|---|---|"]
    for kind in ("legitimate", "fault"):
        for name, got in verdicts.items():
            if (name.startswith("fault:")) != (kind == "fault"):
                continue
            fails = got.count("FAIL")
            low, high = wilson(fails, len(got))
            lines.append(f"| {name} | {kind} | {fails}/{len(got)} | [{low:.2f}, {high:.2f}] |")
    legit = [v for n, got in verdicts.items() if not n.startswith("fault:") for v in got]
    fails = legit.count("FAIL")
    low, high = wilson(fails, len(legit))
    lines.append(f"\nlegitimate rows pooled: {fails}/{len(legit)} false alarms (95 % up to {high:.1%})")
    return "\n".join(lines)


def sweep_table(seeds: dict, gate: PositionGate, band_size: int, edges: list[int]) -> str:
    """Each row's whole-sweep outcome over the seeds (out in any bin = FAIL; a fault's onset bin), and per seed the
    legitimate rows out, with the bin (named by its last position + 1, the sweep's length)."""
    bins = list(itertools.pairwise(edges))
    per_bin = [tally(seeds, gate, band_size, start, stop) for start, stop in bins]
    names = list(per_bin[0])
    lines = ["the sweep as a whole (a row is out at a length when its bin FAILS)",
             "| row | kind | sweeps with a bin out / seeds | 95 % interval | onsets (length: seeds) |",
             "|---|---|---|---|---|"]
    order = sorted(seeds)
    for name in names:
        outs = [[per_bin[b][name][i] == "FAIL" for b in range(len(bins))] for i in range(len(order))]
        failed = sum(any(o) for o in outs)
        low, high = wilson(failed, len(outs))
        onsets: dict[int, int] = {}
        for o in outs:
            if any(o):
                length = bins[o.index(True)][1]
                onsets[length] = onsets.get(length, 0) + 1
        kind = "fault" if name.startswith("fault:") else "legitimate"
        text = ", ".join(f"{k}: {v}" for k, v in sorted(onsets.items())) or "-"
        lines.append(f"| {name} | {kind} | {failed}/{len(outs)} | [{low:.2f}, {high:.2f}] | {text} |")
    legit = [n for n in names if not n.startswith("fault:")]
    clean = 0
    lines.append("\nper seed, legitimate rows out (row@length):")
    for i, seed in enumerate(order):
        out = [f"{n}@{bins[b][1]}" for n in legit for b in range(len(bins)) if per_bin[b][n][i] == "FAIL"]
        clean += not out
        lines.append(f"  seed {seed}: {', '.join(out) or 'none'}")
    low, high = wilson(len(order) - clean, len(order))
    lines.append(f"seeds where every legitimate row PASSes the whole sweep: {clean}/{len(order)}; seeds with a "
                 f"legitimate row out: 95 % interval [{low:.2f}, {high:.2f}]")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+")
    parser.add_argument("--band", type=int, default=4)
    parser.add_argument("--bins", default="")
    parser.add_argument("--skip-seeds", default="", help="seeds left out (e.g. those a gate was tuned on): 0,1,2")
    parser.add_argument("--seeds", default="", help="only these seeds (comma-separated)")
    defaults = PositionGate()
    parser.add_argument("--position-ratio", type=float, default=defaults.position_ratio)
    parser.add_argument("--neighbours", type=int, default=defaults.neighbours)
    parser.add_argument("--exceed-limit", type=float, default=defaults.exceed_limit)
    parser.add_argument("--exceed-slack", type=int, default=defaults.exceed_slack)
    parser.add_argument("--median-systematic", type=float, default=defaults.median_systematic)
    parser.add_argument("--median-sampling", type=float, default=defaults.median_sampling)
    parser.add_argument("--forgive-runs", type=int, default=0, help="RunForgivingGate: runs not counted (0: off)")
    parser.add_argument("--run-length", type=int, default=RunForgivingGate.run_length)
    parser.add_argument("--run-gap", type=int, default=RunForgivingGate.run_gap)
    args = parser.parse_args()
    seeds, meta = {}, {}
    for path in args.files:
        data = torch.load(path)
        seeds.update(data["seeds"])
        meta = data
    for seed in (int(x) for x in args.skip_seeds.split(",") if x):
        seeds.pop(seed, None)
    if args.seeds:
        seeds = {k: v for k, v in seeds.items() if k in {int(x) for x in args.seeds.split(",") if x}}
    gate = PositionGate(args.position_ratio, args.neighbours, args.exceed_limit, args.exceed_slack,
                        args.median_systematic, args.median_sampling)
    if args.forgive_runs:
        gate = RunForgivingGate(*vars(gate).values(), args.forgive_runs, args.run_length, args.run_gap)
    forgiving = (f"; not counted: the {args.forgive_runs} largest runs of beyond positions (at most {args.run_gap} "
                 f"apart) spanning <= {args.run_length} positions" if args.forgive_runs else "")
    print(f"{meta.get('model')}, {meta.get('tokens')} tokens, {len(seeds)} seeds ({min(seeds)}..{max(seeds)}), band of "
          f"{args.band}; gate: {gate.describe()}{forgiving}\n")
    print(table(tally(seeds, gate, args.band), "every position"))
    edges = [0] + [int(x) for x in args.bins.split(",") if x]
    for start, stop in itertools.pairwise(edges):
        print()
        print(table(tally(seeds, gate, args.band, start, stop), f"positions {start}..{stop - 1} (a sweep bin)"))
    if len(edges) > 2:
        print()
        print(sweep_table(seeds, gate, args.band, edges))


if __name__ == "__main__":
    main()
