"""Comparison rows shared by the checks: distances of one backend's output from the exact
reference (and from the baseline kernel), judged beside the noise band (`glmcheck.checks.band`).
Informational rows carry verdict "-".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch

from glmcheck.checks import metrics
from glmcheck.checks.band import FAIL, INFO, PASS, Band, Gate  # noqa: F401  (the verdict words, one place)

GATED_STATS = ("rel_l2", "token_max_rel_l2", "scale_bias", "scale_bias_se")


@dataclass
class ComparisonRow:
    """One row of a comparison table (all metrics in float64 on the CPU). `rel_l2` is the distance
    the gate judges (to the exact reference); `extra` holds the further statistics (layer0's
    token_max_rel_l2 and scale_bias), the distance to the baseline kernel and check-specific fields.
    `measured` is False for a row with nothing to compare (a backend never called): its numbers are
    missing, not a NaN the backend produced."""

    comparison: str
    backend: str
    against: str
    compared_on: str
    cosine: float
    rel_l2: float
    max_abs: float
    verdict: str = INFO
    tokens: int | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)
    measured: bool = True

    def as_dict(self) -> dict:
        """The record row: every field and extra statistic, and `nonfinite`, the comma-separated names
        of the measured statistics that came out NaN (a record's float columns cannot tell a NaN the
        backend produced from a cell that does not apply; the tables print `nan` for the first, `-`
        for the second)."""
        row = asdict(self)
        measured = row.pop("measured")
        row.update(row.pop("extra"))
        row["nonfinite"] = ",".join(k for k, v in row.items() if measured and isinstance(v, float) and math.isnan(v))
        return row

    def stats(self) -> dict[str, float]:
        """The statistics a gate may judge: rel_l2 and those of GATED_STATS in extra."""
        return {"rel_l2": self.rel_l2, **{k: self.extra[k] for k in GATED_STATS[1:] if k in self.extra}}


def compare(comparison: str, backend: str, against: str, compared_on: str,
            actual: torch.Tensor, expected: torch.Tensor, *, per_token: bool = False, **kw) -> ComparisonRow:
    """A row with cosine, rel-L2 and max-abs of actual vs expected (verdict set later); with
    `per_token` (tensors [T, ...]) also token_max_rel_l2 and scale_bias (+ its standard error)."""
    row = ComparisonRow(comparison, backend, against, compared_on, metrics.cosine(actual, expected),
                        metrics.rel_l2(actual, expected), metrics.max_abs(actual, expected), **kw)
    if per_token:
        bias, se = metrics.scale_bias(actual, expected)
        row.extra |= {"token_max_rel_l2": metrics.token_max_rel_l2(actual, expected), "scale_bias": bias,
                      "scale_bias_se": se}
    return row


def cross_check_note(options) -> str:
    """Why an hf row (transformers' own attention, `options` a SwapOptions) is shown but not judged."""
    if options.kv_cache_dtype:
        return f"not comparable under FP8: transformers' attention never sees the {options.kv_cache_dtype} KV"
    return "cross-check of the reference (transformers' bf16 attention), not gated"


def judge_row(row: ComparisonRow, gate: Gate, band: Band) -> None:
    """Set the row's verdict beside the band, its margin (largest statistic / limit) and, when it
    fails, why (appended to its note)."""
    row.verdict, why = gate.judge(row.stats(), band)
    row.extra["margin"] = gate.margin(row.stats(), band)
    row.note = "; ".join(x for x in (row.note, why) if x)


def not_called_row(backend: str, against: str, compared_on: str, expected: int, seen: int, **kw) -> ComparisonRow:
    """A FAIL row for a backend that ran fewer kernel calls than expected."""
    return ComparisonRow(f"{backend} vs {against}", backend, against, compared_on, math.nan, math.nan, math.nan,
                         FAIL, note=f"expected {expected} kernel calls, saw {seen}", measured=False, **kw)


def overall(rows: list[ComparisonRow]) -> str:
    """FAIL if any row failed or none was judged (a check that expected rows and got none), else PASS."""
    verdicts = [r.verdict for r in rows if r.verdict != INFO]
    return PASS if verdicts and FAIL not in verdicts else FAIL
