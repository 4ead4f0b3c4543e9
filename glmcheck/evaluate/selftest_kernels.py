"""`selftest_suite`: the small accuracy suite on the real kernels and, optionally, on mutated copies each with
one planted fault (`glmcheck.selftest`), as a `Report` whose render is the tables `glmcheck selftest` prints.

Light module (no torch at import): the suite is imported when it runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from glmcheck.evaluate.report import Report

MUTANT_HEADERS = ["mutant", "breaks", "detected", "caught by", "margin"]


def fmt_margin(value: float | None) -> str:
    """A gate margin: measured / threshold, 'inf' for NaN output or an exact-check failure."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    return "inf" if math.isinf(value) else f"{value:.3g}x"


def fmt_measured(value: float, threshold: float, crashed: bool = False) -> str:
    """The measured value: scientific for gated values, an integer count for exact checks; `-` when
    the implementation raised (nothing measured), `nan` for a NaN it produced."""
    if crashed:
        return "-"
    if math.isnan(value):
        return "nan"
    return f"{int(value)}" if threshold == 0 else f"{value:.3e}"


def baseline_table(report) -> str:
    """Markdown table of the baseline checks of a `glmcheck.selftest.mutation_runs.SelftestReport`."""
    from glmcheck.records.tables import markdown_table

    rows = [(o.name, fmt_measured(o.measured, o.threshold, o.crashed), f"{o.threshold:g}" if o.threshold else "exact",
             fmt_margin(o.margin),
             "PASS" if o.passed else "FAIL", o.detail) for o in report.baseline]
    return markdown_table(["check", "measured", "threshold", "margin", "verdict", "detail"], rows)


def mutant_table(report, exhaustive: bool) -> str:
    """Markdown table, one row per mutant (with the failed-check count when exhaustive)."""
    from glmcheck.records.tables import markdown_table

    headers = MUTANT_HEADERS + (["checks failed"] if exhaustive else [])
    rows = []
    for r in report.mutants:
        row = [r.mutant.name, r.mutant.breaks, "yes" if r.detected else "NO", r.caught_by or "-",
               fmt_margin(r.margin)]
        if exhaustive:
            row.append(f"{sum(not o.passed for o in r.outcomes)}/{len(r.outcomes)}")
        rows.append(row)
    return markdown_table(headers, rows)


def _text(report, exhaustive: bool, with_mutants: bool) -> str:
    lines = [baseline_table(report),
             "margin = measured / threshold (below 1 passes); inf = NaN/Inf output or an exact check failed",
             f"baseline: {'PASS' if report.baseline_passed else 'FAIL'} ({report.baseline_seconds:.1f} s)"]
    if with_mutants:
        lines += ["", mutant_table(report, exhaustive),
                  f"score: {report.detected}/{report.total} ({100 * report.score:.0f}%)",
                  f"mutant loop: {report.mutant_seconds:.1f} s"]
        if not report.baseline_passed:
            lines.append("note: the baseline failed, so mutant detections prove nothing")
    return "\n".join(lines)


def selftest_suite(*, mutants: bool = False, only: str | None = None, seed: int = 0, exhaustive: bool = False,
                   progress: Callable[[str], None] | None = None) -> Report:
    """The suite on the real kernels (the baseline), then on every catalogued mutant (`mutants`) or on the one
    named `only`; `exhaustive` runs every check on every mutant (default: stop at the first failing check).
    `progress(name)` is called as each part starts. Verdict PASS when the baseline passes and every mutant run is
    detected, FAIL otherwise; rows one per baseline check and one per mutant."""
    import glmcheck.kernels  # noqa: F401  (the interpreter on a machine without CUDA)
    from glmcheck.checks.band import FAIL, PASS
    from glmcheck.evaluate.report import Report
    from glmcheck.selftest import mutation_runs
    from glmcheck.selftest.mutants import CATALOGUE, find_mutant

    chosen = [find_mutant(only)] if only else list(CATALOGUE) if mutants else []
    report = mutation_runs.run_selftest(chosen, seed=seed, exhaustive=exhaustive, progress=progress)
    rows = [{"part": "baseline", "name": o.name, "passed": o.passed, "measured": o.measured, "threshold": o.threshold,
             "margin": o.margin, "detail": o.detail} for o in report.baseline]
    rows += [{"part": "mutant", "name": r.mutant.name, "passed": r.detected, "caught_by": r.caught_by,
              "margin": r.margin, "detail": r.mutant.breaks} for r in report.mutants]
    return Report("selftest", PASS if report.passed else FAIL, rows,
                  {"baseline_seconds": report.baseline_seconds, "mutant_seconds": report.mutant_seconds},
                  {}, {"mutants": [m.name for m in chosen], "seed": seed, "exhaustive": exhaustive},
                  extra={"table": _text(report, exhaustive, bool(chosen))})
