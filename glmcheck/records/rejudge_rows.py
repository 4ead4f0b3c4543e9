"""A record's rows as `glmcheck.records.rejudge` reads them: plain values (a parquet file turns None into NaN and ints
of a column with gaps into floats), the summary's copy of the rows held to the rows file, and the all-position rule
that logits and the in-process sweep share."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import pandas as pd

from glmcheck.checks.band import FAIL, INCONCLUSIVE, MIN_BAND, PASS


class RecordMismatch(ValueError):
    """A record whose verdicts or rows disagree; the message names the field."""


def plain(value: Any) -> Any:
    """A cell as a plain Python value: numpy scalars unwrapped, NaN and None both None, arrays as lists."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def records(rows: pd.DataFrame) -> list[dict]:
    """The rows file as a list of dicts of plain values (`plain`)."""
    return [{k: plain(v) for k, v in row.items()} for row in rows.to_dict(orient="records")]


def number(value: Any) -> float:
    """A cell as a float (None: NaN)."""
    return math.nan if value is None else float(value)


def measured(row: dict, key: str) -> bool:
    """Whether the row holds a value for `key`: present, or a NaN the backend produced (its `nonfinite` list)."""
    if row.get(key) is not None:
        return True
    return key in str(row.get("nonfinite") or "").split(",")


def is_band_row(row: dict) -> bool:
    return str(row.get("comparison", "")).startswith("noise band:")


def row_label(row: dict) -> str:
    """A row's name in a message: its comparison, else its backend (and length)."""
    if row.get("comparison"):
        return str(row["comparison"])
    label = str(row.get("backend") or row.get("candidate") or row.get("name") or "?")
    return f"{label} at {int(row['tokens'])} tokens" if row.get("tokens") is not None else label


def expect(row: dict, index: int, expected: str, why: str = "") -> str:
    """`expected`, once row `index` is seen to say it (RecordMismatch naming the row otherwise)."""
    if row.get("verdict") != expected:
        raise RecordMismatch(f"rows.parquet: row {index} ({row_label(row)}) has verdict {row.get('verdict')!r}; its "
                             f"statistics and the record's gate give {expected!r}{why}")
    return expected


def _same(a: Any, b: Any) -> bool:
    a, b = plain(a), plain(b)
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b) and not (isinstance(a, str) or isinstance(b, str))
    if isinstance(a, numbers.Real) and isinstance(b, numbers.Real):
        return float(a) == float(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def check_same_rows(summary: dict, rows: pd.DataFrame) -> None:
    """RecordMismatch (ValueError) naming the row and field where the summary's copy of the rows (`rows`) differs
    from the rows file; a summary without a copy has nothing to hold."""
    copy = summary.get("rows")
    if copy is None:
        return
    if not isinstance(copy, list) or not all(isinstance(r, dict) for r in copy):
        raise RecordMismatch("summary.json: rows is not a list of objects")
    stored = records(rows)
    if len(copy) != len(stored):
        raise RecordMismatch(f"summary.json: rows holds {len(copy)} rows, rows.parquet {len(stored)}")
    for index, (mine, theirs) in enumerate(zip(copy, stored)):
        for key, value in mine.items():
            if not _same(value, theirs.get(key)):
                raise RecordMismatch(f"summary.json: rows[{index}].{key} is {value!r}, rows.parquet holds "
                                     f"{theirs.get(key)!r}")


def position_band_kind(band_rows: list[dict], statistic: str, highest: str) -> str:
    """What the band rows of one length say of the all-position band (`PositionBand.unfit`): "few", "nonfinite",
    "zero" or "" (it judges): `statistic` a row's mean KL, `highest` its largest."""
    if len(band_rows) < MIN_BAND:
        return "few"
    if not all(math.isfinite(number(row.get(statistic))) for row in band_rows):
        return "nonfinite"
    if all(number(row.get(highest)) == 0 for row in band_rows):
        return "zero"
    return ""


def position_verdict(row: dict, kind: str) -> str:
    """The all-position gate's verdict of a row from its margin (`PositionGate.judge`: FAIL exactly when the margin
    exceeds 1; a non-finite row FAILS) beside a band of `kind` (`position_band_kind`)."""
    margin = number(row.get("margin"))
    if not math.isfinite(number(row.get("exceed"))) or math.isnan(margin):
        return FAIL
    verdict = FAIL if margin > 1 else PASS
    if kind in ("few", "zero"):
        return INCONCLUSIVE
    return FAIL if kind else verdict
