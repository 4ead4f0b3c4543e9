"""Every verdict of a record recomputed from its rows with the record's own gate: a record cannot say PASS where its
rows say FAIL.

`check_verdicts(summary, rows)` raises ValueError naming the field (`summary.json: verdict ...`, `rows.parquet: row
N (...) ...`) when the summary's rows are not the rows file's, when a row's verdict is not what the check's own rule
gives for its statistics, or when the record's verdict is not what its rows give. The rules are the checks' own,
called on the recorded statistics: layer0 and drift `Gate.verdict` beside the band the record holds; logits and the
in-process sweep the all-position gate's margin (`glmcheck.checks.position_gate`: a row FAILS exactly when its margin
exceeds 1) beside what the band rows say of the band; the sweep against servers its distance against the limit;
firsttoken `summarize` over the recorded outcomes; tasks the paired verdict's rules (`glmcheck.tasks.mcnemar`). The
commands that print a table (selftest, bench, kernel-check, plan, ...) have their verdict recomputed from their rows'
outcomes.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from glmcheck.checks.band import FAIL, INCONCLUSIVE, INFO, PASS, REHEARSAL, Band, Gate
from glmcheck.checks.rows import GATED_STATS, layer0_bar, overall_of
from glmcheck.records.rejudge_rows import (
    RecordMismatch,
    check_same_rows,
    expect,
    is_band_row,
    measured,
    number,
    position_band_kind,
    position_verdict,
    records,
)
from glmcheck.records.rejudge_sweeps import firsttoken_verdict, sweep_verdict

VERDICTS = (PASS, FAIL, INCONCLUSIVE)


def check_verdicts(summary: dict[str, Any], rows: pd.DataFrame) -> None:
    """ValueError naming the field where the record's verdicts are not what its rows give (module docstring)."""
    command = summary.get("command")
    rule = RULES.get(command)
    if rule is None:
        return
    check_same_rows(summary, rows)
    if summary.get("verdict") == REHEARSAL or "rehearsal" in summary:
        _check_rehearsal(summary, rows)
        return
    if summary.get("verdict") not in VERDICTS:
        raise ValueError(f"summary.json: verdict {summary.get('verdict')!r} is not one of {', '.join(VERDICTS)}")
    try:
        expected = rule(summary, records(rows))
    except RecordMismatch:
        raise
    except (KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"a {command} record lacks what its verdicts are computed from ({type(err).__name__}: "
                         f"{err})") from None
    if expected != summary.get("verdict"):
        raise ValueError(f"summary.json: verdict {summary.get('verdict')!r}, but its rows give {expected!r} (edited "
                         f"after it was written)")


def _check_rehearsal(summary: dict, rows: pd.DataFrame) -> None:
    """A rank rehearsal (`glmcheck.evaluate.rehearsal`) judges nothing: verdict REHEARSAL with its measurements, every
    row's verdict '-'."""
    if summary.get("verdict") != REHEARSAL or not isinstance(summary.get("rehearsal"), dict):
        raise ValueError(f"summary.json: verdict {summary.get('verdict')!r} with a rehearsal field: a rank rehearsal's "
                         f"record is REHEARSAL with its measurements, or no rehearsal at all")
    for index, row in enumerate(records(rows)):
        if row.get("verdict", INFO) != INFO:
            raise ValueError(f"rows.parquet: row {index} has verdict {row['verdict']!r} in a rank rehearsal, which "
                             f"judges nothing")


def _gate_verdict(row: dict, index: int, gate: Gate, band: Band) -> str:
    """A comparison row of layer0 / drift: INFO where it is not judged (a band sample, transformers' cross-check),
    FAIL where nothing was measured (a backend that raised or was never called), else the gate's verdict."""
    if is_band_row(row) or str(row.get("backend", "")).startswith("hf_"):
        return expect(row, index, INFO, " (a band sample or a cross-check is not judged)")
    if not measured(row, "rel_l2"):
        return expect(row, index, FAIL, " (nothing measured: the backend raised or was never called)")
    stats = {"rel_l2": number(row["rel_l2"])}
    stats |= {k: number(row[k]) for k in GATED_STATS[1:] if k in row and measured(row, k)}
    return expect(row, index, gate.verdict(stats, band)[0])


def _layer0(summary: dict, rows: list[dict]) -> str:
    facts, options = summary["facts"], summary["options"]
    stored = facts["band"]
    band = Band(stored["samples"], stored["names"], stored.get("apart"))
    gate = Gate(ratio=options["gate_ratio"], cap=options.get("max_rel_l2"))
    return overall_of([_gate_verdict(row, i, gate, band) for i, row in enumerate(rows)])


def _drift(summary: dict, rows: list[dict]) -> str:
    options = summary["options"]
    gate = Gate(ratio=options["gate_ratio"], cap=options.get("max_rel_l2"))
    samples: dict[int, list[float]] = {}
    for row in rows:
        if is_band_row(row):
            samples.setdefault(int(row["layer"]), []).append(number(row["rel_l2"]))
    verdicts = []
    for i, row in enumerate(rows):
        layer = row.get("layer")
        band = Band({"rel_l2": samples.get(int(layer), []) if measured(row, "layer") else []})
        verdicts.append(_gate_verdict(row, i, gate, band))
    return overall_of(verdicts)


def _logits(summary: dict, rows: list[dict]) -> str:
    variants = {}
    for row in rows:
        if is_band_row(row) and "(rerun)" not in row["comparison"]:
            variants.setdefault(row["tokens"], []).append(row)
    verdicts = []
    for i, row in enumerate(rows):
        if is_band_row(row) or str(row["backend"]).startswith("hf_"):
            verdicts.append(expect(row, i, INFO, " (a band sample or a cross-check is not judged)"))
        elif not measured(row, "rel_l2"):
            verdicts.append(expect(row, i, FAIL, " (nothing measured: the backend raised or was never called)"))
        elif "mean_kl" not in row:  # a record from before every position was judged: its final-position rows
            verdicts.append(row["verdict"])
        else:
            kind = position_band_kind(variants.get(row["tokens"], []), "mean_kl", "kl_max")
            verdicts.append(expect(row, i, position_verdict(row, kind)))
    return overall_of(verdicts)


def _tasks(summary: dict, rows: list[dict]) -> str:
    from glmcheck.tasks.mcnemar import fail_rule, passes

    verdicts = []
    for i, row in enumerate(rows):
        if isinstance(row.get("fault"), str) and row["fault"]:
            verdicts.append(expect(row, i, FAIL, " (its server gave no answers)"))
            continue
        n = int(row["n"])
        drop = (int(row["table_only_reference"]) - int(row["table_only_candidate"])) / n
        max_drop, alpha, power = number(row["max_drop"]), number(row["alpha"]), number(row["power"])
        if bool(fail_rule(number(row["p_one_sided_drop"]), drop, alpha, max_drop)):
            expected = FAIL
        elif max_drop > 0 and passes(n, max_drop, number(row["discordance"]), alpha, power):
            expected = PASS
        else:
            expected = INCONCLUSIVE
        verdicts.append(expect(row, i, expected))
    return overall_of(verdicts)


def _always_pass(summary: dict, rows: list[dict]) -> str:
    """Records whose command has no verdict of its own (measurements): PASS."""
    return PASS


def _all_passed(summary: dict, rows: list[dict]) -> str:
    """selftest (every baseline check passed, every mutant caught) and bench-model (every point passed its gate)."""
    return PASS if all(bool(row.get("passed")) for row in rows) else FAIL


def _kernel_check(summary: dict, rows: list[dict]) -> str:
    """kernel-check: each row by its rule with the record's gates (a gated row: rel-L2 and cosine; a rerun: bitwise,
    nothing apart; an informative row: not judged); PASS when no row FAILS."""
    facts = summary["facts"]
    verdicts = []
    for i, row in enumerate(rows):
        rule = row["rule"]
        if rule == "gate":
            ok = number(row["rel_l2"]) <= number(facts["rel_l2_gate"]) and \
                number(row["cosine"]) >= number(facts["cosine_gate"])
        elif rule == "bitwise":
            ok = number(row["max_abs"]) == 0
        else:
            verdicts.append(expect(row, i, INFO, " (an informative row is not judged)"))
            continue
        verdicts.append(expect(row, i, PASS if ok else FAIL))
    return FAIL if FAIL in verdicts else PASS


def _plan(summary: dict, rows: list[dict]) -> str:
    """plan: each path fits when its total per rank is within the record's headroom of the GPU; PASS when the
    absorbed path (the first row) fits."""
    headroom = number(summary["facts"]["headroom"])
    for i, row in enumerate(rows):
        fits = number(row["total_gib_per_rank"]) <= headroom * number(row["gpu_gib"])
        if bool(row["fits"]) != fits:
            raise RecordMismatch(f"rows.parquet: row {i} ({row['path']}) has fits {row['fits']!r}; its totals and the "
                                 f"record's headroom give {fits!r}")
    return PASS if rows and rows[0]["path"] == "absorbed" and bool(rows[0]["fits"]) else FAIL


def _selftest_rates(summary: dict, rows: list[dict]) -> str:
    return PASS if layer0_bar(rows)[0] else FAIL


RULES = {"layer0": _layer0, "drift": _drift, "logits": _logits, "firsttoken": firsttoken_verdict,
         "sweep": sweep_verdict, "tasks": _tasks, "selftest": _all_passed, "bench-model": _all_passed,
         "selftest-rates": _selftest_rates, "union-stats": _always_pass, "bench": _always_pass,
         "capture-indices": _always_pass, "selftest-power": _always_pass, "kernel-check": _kernel_check,
         "plan": _plan, "backends": _always_pass}
