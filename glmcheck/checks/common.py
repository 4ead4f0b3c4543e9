"""Comparison rows and the verdict rule shared by the checks.

Every comparison row is judged against a band printed on the page: the larger of
- the control: the reference compared with itself on a second run, and
- the floor: `reference:bf16` (the fp32 reference with its output rounded to bf16, i.e. an ideal
  bf16-output kernel) compared with the reference. A deterministic reference reruns
  bit-identically (control 0); the floor is what any bf16 kernel must at least cost, carried
  through the model.

    PASS  when rel-L2 <= gate_ratio x band, or rel-L2 <= max_rel_l2 (absolute bound);
    FAIL  otherwise, and always when either tensor has NaN/Inf or the backend was expected to
          run and was never called.

Each check has a documented default absolute bound (`--max-rel-l2`; 0 turns it off).
Informational rows carry verdict "-".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch

from glmcheck.checks import metrics

PASS, FAIL, INFO = "PASS", "FAIL", "-"


@dataclass(frozen=True)
class Gate:
    """The verdict rule: ratio to the control's rel-L2, or an absolute rel-L2 bound."""

    ratio: float = 2.0
    max_rel_l2: float | None = None

    def __post_init__(self):
        if not (isinstance(self.ratio, (int, float)) and self.ratio > 0 and math.isfinite(self.ratio)):
            raise ValueError(f"gate ratio must be a positive number, got {self.ratio!r}")
        if self.max_rel_l2 is not None and not (self.max_rel_l2 >= 0 and math.isfinite(self.max_rel_l2)):
            raise ValueError(f"max_rel_l2 must be a non-negative number, got {self.max_rel_l2!r}")

    def verdict(self, rel_l2: float, band: float) -> str:
        """PASS/FAIL for one row against the band max(control, floor) (NaN anywhere fails)."""
        if not math.isfinite(rel_l2):
            return FAIL
        if math.isfinite(band) and rel_l2 <= self.ratio * band:
            return PASS
        if self.max_rel_l2 is not None and self.max_rel_l2 > 0 and rel_l2 <= self.max_rel_l2:
            return PASS
        return FAIL

    def describe(self) -> str:
        bound = f" or rel-L2 <= {self.max_rel_l2:g}" if self.max_rel_l2 else ""
        return (f"PASS when rel-L2 <= {self.ratio:g} x max(control, floor){bound}; NaN/Inf or a backend "
                f"never called FAILS")


@dataclass
class ComparisonRow:
    """One row of a comparison table (all metrics in float64 on the CPU)."""

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

    def as_dict(self) -> dict:
        row = asdict(self)
        row.update(row.pop("extra"))
        return row


def compare(comparison: str, backend: str, against: str, compared_on: str,
            actual: torch.Tensor, expected: torch.Tensor, **kw) -> ComparisonRow:
    """A row with cosine, rel-L2 and max-abs of actual vs expected (verdict set later)."""
    return ComparisonRow(comparison, backend, against, compared_on, metrics.cosine(actual, expected),
                         metrics.rel_l2(actual, expected), metrics.max_abs(actual, expected), **kw)


def not_called_row(backend: str, against: str, compared_on: str, expected: int, seen: int, **kw) -> ComparisonRow:
    """A FAIL row for a backend that ran fewer kernel calls than expected."""
    return ComparisonRow(f"{backend} vs {against}", backend, against, compared_on, math.nan, math.nan, math.nan,
                         FAIL, note=f"expected {expected} kernel calls, saw {seen}", **kw)


FLOOR_BACKEND = "reference:bf16"


def band(control: ComparisonRow, floor: ComparisonRow | None) -> float:
    """The gate's band: the larger of the control's and the floor's rel-L2 (NaN if the control is)."""
    if not math.isfinite(control.rel_l2):
        return math.nan
    return max(control.rel_l2, floor.rel_l2 if floor is not None and math.isfinite(floor.rel_l2) else 0.0)


def overall(rows: list[ComparisonRow]) -> str:
    """FAIL if any row failed, else PASS."""
    return FAIL if any(r.verdict == FAIL for r in rows) else PASS
