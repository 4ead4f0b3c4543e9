"""The verdicts of firsttoken and sweep records recomputed from their rows (`glmcheck.records.rejudge`): firsttoken's
per-backend rows through the check's own `summarize` over the recorded prompt outcomes, the sweep's rows bin by bin
and its onsets through `glmcheck.checks.sweep.onsets`."""

from __future__ import annotations

import dataclasses
import math

from glmcheck.checks.band import FAIL, INCONCLUSIVE, INFO, JUDGES_NOTHING, PASS, spread_reason
from glmcheck.checks.rows import overall_of
from glmcheck.records.rejudge_rows import (
    RecordMismatch,
    expect,
    number,
    position_band_kind,
    position_verdict,
    row_label,
)


class _TokenIds:
    """A tokenizer that names tokens by id: the recomputation compares verdicts, not the disagreements' text."""

    def token_text(self, token: int) -> str:
        return str(token)


def _outcome(row: dict):
    from glmcheck.checks.firsttoken import PromptOutcome

    fields = {f.name for f in dataclasses.fields(PromptOutcome)}
    values = {k: v for k, v in row.items() if k in fields}
    values["token"], values["ref_token"] = int(values["token"]), int(values["ref_token"])
    values["agree"] = bool(values["agree"])
    for key in ("logprob", "ref_logprob", "ref_gap", "dlogprob"):
        values[key] = number(values[key])
    values["divergence"] = None if values.get("divergence") is None else int(values["divergence"])
    values["fault"] = values.get("fault") or None
    mutual, gap = values.get("divergence_mutual"), values.get("divergence_gap")
    values["divergence_mutual"] = None if mutual is None or _nan(mutual) else bool(mutual)
    values["divergence_gap"] = None if gap is None or _nan(gap) else number(gap)
    return PromptOutcome(**values)


def _nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def firsttoken_verdict(summary: dict, rows: list[dict]) -> str:
    """The record's verdict, once each per-backend row (`summary_rows`) is seen to be what `summarize` makes of the
    recorded prompt outcomes with the record's gate (ratio, tie gap, cap)."""
    from glmcheck.checks.firsttoken import summarize

    stated = summary["summary_rows"]
    facts = summary["facts"]
    names = [r["backend"] for r in stated]
    noise = [r["backend"] for r in stated[1:] if str(r["comparison"]).startswith("noise band:")]
    endpoints = facts.get("source") == "endpoints"
    not_judged = {} if endpoints else {n: "" for n in names if n.startswith("hf_")}
    result = summarize([_outcome(r) for r in rows], names, names[0], _TokenIds(), facts["gate_ratio"],
                       facts.get("max_dlogprob"), facts["tie_gap_option"], facts.get("continue_tokens") or 0, noise,
                       not_judged)
    for index, (mine, theirs) in enumerate(zip(result.summary_rows, stated)):
        for key in ("agree", "prompts", "wide_flips", "wide_divergences", "verdict"):
            if key not in theirs:  # a record from before continuations were judged
                continue
            if mine[key] != theirs[key]:
                raise RecordMismatch(f"summary.json: summary_rows[{index}] ({row_label(theirs)}) has {key} "
                                     f"{theirs[key]!r}; its prompts' outcomes and the record's gate give {mine[key]!r}")
    if endpoints and not any(r["verdict"] != INFO for r in result.summary_rows):
        return FAIL
    return result.verdict


def _windowed_verdict(row: dict, index: int, samples: list[float], variants: int, ratio: float) -> str:
    """A judged row of the sweep against servers: out where its distance exceeds the gate ratio x the band's max
    (`glmcheck.checks.sweep._point_rows`); a row that gave no answer FAILS whatever the band."""
    finite = [v for v in samples if math.isfinite(v)]
    band_max = max(finite) if finite else math.nan
    limit = ratio * band_max
    if not (_same_float(row.get("band_max"), band_max) and _same_float(row.get("limit"), limit)):
        raise RecordMismatch(f"rows.parquet: row {index} ({row_label(row)}) has band max {row.get('band_max')!r} "
                             f"and limit {row.get('limit')!r}; its length's band rows give {band_max!r} and {limit!r}")
    distance = number(row.get("distance"))
    if math.isnan(distance) and row.get("verdict") == FAIL:
        return FAIL
    unfit = spread_reason(finite, "mean_dlogprob", variants, ratio)[0]
    beyond = not distance <= limit
    if unfit and not (beyond and unfit not in JUDGES_NOTHING):
        return INCONCLUSIVE
    return FAIL if beyond else PASS


def _same_float(value, expected: float) -> bool:
    value = number(value)
    return value == expected or (math.isnan(value) and math.isnan(expected))


def sweep_verdict(summary: dict, rows: list[dict]) -> str:
    """The record's verdict, once each judged row is seen to be what the gate makes of its length's band and its
    `out` to match its verdict, and the onsets to be what `onsets` makes of the rows."""
    from glmcheck.checks.sweep import onsets

    facts = summary["facts"]
    band = list(facts["band"])
    positions = facts.get("statistic") == "positions"
    rerun = f"{facts['reference']} (rerun)"
    judged = list(dict.fromkeys(r["backend"] for r in rows if r.get("role") == "judged"))
    by_length: dict[int, list[dict]] = {}
    for row in rows:
        by_length.setdefault(row["tokens"], []).append(row)
    for index, row in enumerate(rows):
        if row.get("role") != "judged":
            expect(row, index, INFO, " (a band sample is not judged)")
            continue
        mine = by_length[row["tokens"]]
        if positions:
            kind = position_band_kind([r for r in mine if r["backend"] in band], "distance", "distance")
            verdict = expect(row, index, position_verdict(row, kind))
        else:
            samples = [number(r.get("distance")) for r in mine if r["backend"] in (rerun, *band)]
            verdict = expect(row, index, _windowed_verdict(row, index, samples, len(band), facts["gate_ratio"]))
        out = {FAIL: True, PASS: False, INCONCLUSIVE: None}[verdict]
        if row.get("out") != out:
            raise RecordMismatch(f"rows.parquet: row {index} ({row_label(row)}) has out {row.get('out')!r} with "
                                 f"verdict {verdict}; that verdict is out={out!r}")
    found = onsets(rows, judged)
    stated = summary.get("onsets", {})
    for name, mine in found.items():
        theirs = stated.get(name, {})
        for key in ("onset", "stays_out", "verdict"):
            if theirs.get(key) != mine[key]:
                raise RecordMismatch(f"summary.json: onsets[{name!r}].{key} is {theirs.get(key)!r}; its rows give "
                                     f"{mine[key]!r}")
    return overall_of([v["verdict"] for v in found.values()])
