"""`glmcheck sweep`: at which prompt length does a row leave the band?

The DSA bugs users reported on GLM-5.2 looked alike: output fine below some length, corrupt above it
(1.5 k to 5.9 k tokens), found by sweeping the prompt length. At each length L of a geometric grid,
every row's next-token distributions at the last W positions of the prompt's first L tokens (the window:
one position is one noisy sample, a legitimate kernel leaves a one-position band at some length of a
long grid) are compared with the exact reference's: the distance is the median over the window of
`topk_distance` (mean |dlogprob| over the reference's k most likely tokens). The band at L: the reference run again and
the band samples (in process the ideal bf16 kernels `band:K`; over HTTP the reference endpoint queried again and the
`--band-endpoint`s). A row is **out** at L when its distance exceeds gate_ratio x the band's max at L; where the band
cannot judge (`glmcheck.checks.band.spread_reason`: too few, too wide, split, or of zero width) the point is
INCONCLUSIVE unless the row is beyond even that gate (except with too few samples or zero width: then nothing is
judged). A row that gave no distributions at a length (`Faulted`: it raised, broke the kernel contract, ran no kernel
call, or its server answered non-finite logits) is out there, whatever the band.
Per row: the **onset** (the first length where it is out), whether it **stays out** at every longer
length, and its verdict (FAIL with an onset, else INCONCLUSIVE if a point could not be judged, else PASS).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from glmcheck.checks.band import FAIL, INCONCLUSIVE, INFO, JUDGES_NOTHING, PASS, spread_reason
from glmcheck.checks.distributions import Distribution, topk_distance
from glmcheck.checks.rows import overall_of


def window_distance(row: list[Distribution], reference: list[Distribution], k: int) -> tuple[float, int]:
    """(median over the window's positions of `topk_distance`, total unlisted tokens); ValueError when the
    two windows differ in length (a source that gave fewer positions than asked). The median, not the mean: a
    fault that fires from some length on moves every position past it, while a discrete decision (an expert
    routing or top-k flip) a legitimate kernel takes moves one or a few positions (on ref-gpu at 2048 tokens
    such a flip put three legitimate kernels at 6x the band's mean)."""
    if len(row) != len(reference) or not row:
        raise ValueError(f"a row gave {len(row)} positions where the reference gave {len(reference)}")
    pairs = [topk_distance(mine, ref, k) for mine, ref in zip(row, reference)]
    return statistics.median(d for d, _ in pairs), sum(u for _, u in pairs)

@dataclass(frozen=True)
class Faulted:
    """What a judged row gave at a length instead of distributions: none, and why (it raised, broke the kernel
    contract, or its server answered non-finite logits). The row is out there: a FAIL."""

    reason: str


# prompt length L -> {row name: its distributions at the window's positions, or Faulted}, the reference's rerun
# included
Fetch = Callable[[int], dict[str, "list[Distribution] | Faulted"]]


def geometric_lengths(first: int, last: int, per_octave: int = 1) -> list[int]:
    """The grid first, first * 2^(1/per_octave), ... up to last (both included; rounded to ints, each
    once). ValueError naming --tokens for first < 1 or last < first."""
    if isinstance(first, bool) or isinstance(last, bool) or not (isinstance(first, int) and isinstance(last, int)) \
            or first < 1 or last < first:
        raise ValueError(f"--tokens must be A..B with 1 <= A <= B, got {first}..{last}")
    if isinstance(per_octave, bool) or not isinstance(per_octave, int) or not 1 <= per_octave <= 16:
        raise ValueError(f"--per-octave must be an int in [1, 16], got {per_octave!r}")
    grid, step = [], 0
    while True:
        length = round(first * 2 ** (step / per_octave))
        if length > last:
            break
        if not grid or length != grid[-1]:
            grid.append(length)
        step += 1
    if grid[-1] != last:
        grid.append(last)
    return grid


def parse_token_range(text: str) -> tuple[int, int]:
    """'A..B' -> (A, B); ValueError naming --tokens otherwise."""
    parts = text.split("..")
    try:
        if len(parts) != 2:
            raise ValueError
        return int(parts[0]), int(parts[1])
    except ValueError:
        raise ValueError(f"--tokens must be A..B (a geometric grid from A to B tokens), got {text!r}") from None


@dataclass
class SweepResult:
    """One row per (length, row): distance, band max, limit, out, verdict; per judged row its onset."""

    rows: list[dict]
    onsets: dict[str, dict]
    verdict: str
    facts: dict = field(default_factory=dict)


def _point_rows(length: int, dists: dict[str, list[Distribution] | Faulted], reference: str, rerun: str,
                band: list[str], judged: list[str], k: int, gate_ratio: float) -> list[dict]:
    """The rows of one length: the band samples (verdict '-') and each judged row against them."""
    ref = dists[reference]
    measured = {name: (math.nan, 0) if isinstance(dists[name], Faulted) else window_distance(dists[name], ref, k)
                for name in [rerun, *band, *judged]}
    samples = [measured[name][0] for name in [rerun, *band]]
    finite = [v for v in samples if math.isfinite(v)]
    band_max = max(finite) if finite else math.nan
    limit = gate_ratio * band_max
    unfit, why = spread_reason(finite, "mean_dlogprob", len(band), gate_ratio)
    out = []
    for name in [rerun, *band, *judged]:
        distance, unlisted = measured[name]
        row = {"tokens": length, "backend": name, "distance": distance, "band_max": band_max, "limit": limit,
               "unlisted": unlisted, "role": "band" if name in (rerun, *band) else "judged", "out": None,
               "verdict": INFO, "note": ""}
        if name in judged and isinstance(dists[name], Faulted):  # no answer is out whatever the band
            row["out"], row["verdict"], row["note"] = True, FAIL, dists[name].reason
        elif name in judged:
            beyond = not distance <= limit  # NaN distance is out
            if unfit and not (beyond and unfit not in JUDGES_NOTHING):
                row["verdict"], row["note"] = INCONCLUSIVE, why
            else:
                row["out"] = beyond
                row["verdict"] = FAIL if beyond else PASS
            if unlisted:
                bound = f"{unlisted} of the reference's top-{k} tokens unlisted by this row: distance is a lower bound"
                row["note"] = "; ".join(x for x in (row["note"], bound) if x)
        out.append(row)
    return out


def onsets(rows: list[dict], judged: list[str]) -> dict[str, dict]:
    """Per judged row: onset (first length out, None), stays_out (out at every later judged length),
    verdict (FAIL with an onset, else INCONCLUSIVE if any point was, else PASS)."""
    result = {}
    for name in judged:
        mine = sorted((r for r in rows if r["backend"] == name), key=lambda r: r["tokens"])
        out_at = [r["tokens"] for r in mine if r["out"]]
        onset = out_at[0] if out_at else None
        stays = onset is not None and all(r["out"] is not False for r in mine if r["tokens"] >= onset)
        verdict = FAIL if onset is not None else INCONCLUSIVE if any(r["verdict"] == INCONCLUSIVE for r in mine) \
            else PASS
        result[name] = {"onset": onset, "stays_out": stays, "verdict": verdict,
                        "max_distance": max((r["distance"] for r in mine), default=math.nan)}
    return result


def rerun_name(reference: str) -> str:
    return f"{reference} (rerun)"


def run_sweep(fetch: Fetch, reference: str, band: list[str], judged: list[str], lengths: list[int],
              *, k: int = 5, gate_ratio: float = 2.0, window: int = 1,
              on_length: Callable[[int, list[dict]], None] | None = None,
              done: dict[int, list[dict]] | None = None) -> SweepResult:
    """Sweep `lengths`: `fetch(L)` gives every row's distributions at the last `window` positions of the
    first L tokens: the reference's, its rerun's (`rerun_name`), each of `band` (the band samples) and each of
    `judged` (the rows under test). `done` maps lengths already computed (a resumed run) to their rows;
    `on_length` is called after each new length."""
    rerun = rerun_name(reference)
    rows: list[dict] = []
    for length in lengths:
        if done and length in done:
            rows += done[length]
            continue
        dists = fetch(length)
        point = _point_rows(length, dists, reference, rerun, band, judged, k, gate_ratio)
        rows += point
        if on_length is not None:
            on_length(length, point)
    found = onsets(rows, judged)
    verdict = overall_of([v["verdict"] for v in found.values()])
    facts = {"lengths": lengths, "k": k, "window": window, "gate_ratio": gate_ratio, "reference": reference,
             "band": band,
             "gate": f"a row is out at a length when its mean |dlogprob| over the reference's top-{k} tokens (median "
                     f"over the last {window} positions) > "
                     f"{gate_ratio:g} x the band's max there (the reference rerun and {len(band)} band samples); "
                     f"onset = the first length out; FAIL with an onset; INCONCLUSIVE where the band cannot judge "
                     f"(fewer than 3 band samples beside the rerun, max > 3 x median, or zero width)"}
    return SweepResult(rows, found, verdict, facts)
