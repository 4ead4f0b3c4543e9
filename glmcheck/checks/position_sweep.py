"""The length sweep from one forward per row: every position of the longest prompt, binned by prompt length.

Position p's next-token distribution is what a prompt of p + 1 tokens gives (DSA's indexer selects among positions
<= p, so what follows p does not change it). One forward over the longest length L_n therefore holds every shorter
prompt: the positions of prompt lengths L_{i-1} + 1 .. L_i (the bin of grid length L_i; the first bin starts at
length 1) are judged together, beside the band's same positions, by the all-position gate
(`glmcheck.checks.position_gate`). A row is **out** at L_i when its bin FAILS; its onset is the first such bin,
which holds the position where a fault starts. Rows and onsets have the shape of the windowed sweep
(`glmcheck.checks.sweep.onsets`); `distance` is the bin's mean KL, `exceed` its share of positions beyond the band
and `limit` the share the gate allows in that bin.
"""

from __future__ import annotations

import math

from glmcheck.checks.band import FAIL, INCONCLUSIVE, INFO
from glmcheck.checks.position_gate import PositionBand, PositionGate
from glmcheck.checks.positions import PositionStatistics
from glmcheck.checks.rows import overall_of
from glmcheck.checks.sweep import Faulted, SweepResult, onsets


def length_bins(lengths: list[int]) -> list[tuple[int, int, int]]:
    """(length, first position, stop position) per grid length: the positions p (0-based) whose prompts have
    L_{i-1} < p + 1 <= L_i tokens."""
    bins, previous = [], 0
    for length in lengths:
        bins.append((length, previous, length))
        previous = length
    return bins


def sweep_outcome(rows: list[dict], judged: list[str], lengths: list[int], source: str = "one forward",
                  gate: PositionGate = PositionGate()) -> SweepResult:
    """The onsets, verdict and gate facts of a sweep's rows (fresh, or read back from a record); `source` says
    what gave the positions ("one forward", "one request per server")."""
    found = onsets(rows, judged)
    facts = {"lengths": lengths, "statistic": "positions",
             "gate": f"every position of {source} over {lengths[-1]} tokens, binned by prompt length; a row is out at "
                     f"a length when its bin fails: {gate.describe()}; onset = the first length out"}
    return SweepResult(rows, found, overall_of([v["verdict"] for v in found.values()]), facts)


def run_position_sweep(stats: dict[str, PositionStatistics | Faulted], rerun: str, band: list[str],
                       judged: list[str], lengths: list[int], gate: PositionGate = PositionGate(),
                       source: str = "one forward") -> SweepResult:
    """Judge `judged` rows bin by bin. `stats` holds each row's per-position statistics against the exact
    reference over the longest length (each band variant's, each judged row's; the rerun's may be shorter: it is
    reported where it reaches and judges nothing), or a Faulted."""
    position_band = PositionBand.of([stats[name] for name in band], band)
    rows: list[dict] = []
    for length, start, stop in length_bins(lengths):
        bin_band = position_band.window(start, stop)
        band_means = bin_band.distance.mean(dim=1).tolist() if bin_band.distance.numel() else []
        band_max = max(band_means) if band_means else math.nan
        for name in [rerun, *band, *judged]:
            given = stats[name]
            row = {"tokens": length, "positions": stop - start, "backend": name, "distance": math.nan,
                   "band_max": band_max, "limit": gate.allowed_beyond(stop - start) / max(stop - start, 1),
                   "exceed": math.nan, "margin": math.nan,
                   "unlisted": 0, "role": "judged" if name in judged else "band", "out": None, "verdict": INFO,
                   "note": ""}
            if isinstance(given, Faulted):
                row["out"], row["verdict"], row["note"] = True, FAIL, given.reason
                rows.append(row)
                continue
            if len(given) < stop:  # the rerun covers the first bin only (`glmcheck.evaluate.length_sweep`)
                if name in judged:
                    raise ValueError(f"row {name!r} has {len(given)} positions; a judged row needs {lengths[-1]}")
                row["note"] = f"measured over the first {len(given)} positions only"
                rows.append(row)
                continue
            window = given.window(start, stop)
            row["distance"] = float(window.distance.mean())
            if name in judged:
                verdict, why, measures = gate.judge(window, bin_band)
                row |= {"exceed": measures["exceed"], "margin": measures["margin"], "verdict": verdict, "note": why,
                        "out": None if verdict == INCONCLUSIVE else verdict == FAIL}
            rows.append(row)
    return sweep_outcome(rows, judged, lengths, source, gate)
