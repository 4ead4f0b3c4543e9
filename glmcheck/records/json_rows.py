"""A record as JSON (`--format json`): its rows, verdict and facts, strict JSON (no NaN)."""

from __future__ import annotations

import json
import math

import pandas as pd


def render_json(summary: dict, rows: pd.DataFrame) -> str:
    """The record's rows, verdict and facts (and a check's further lists: firsttoken's per-backend rows and
    disagreements, the sweep's onsets, a rank rehearsal's measurements) as one JSON object; a NaN is null."""
    extra = {k: summary[k] for k in ("summary_rows", "disagreements", "onsets", "rehearsal") if k in summary}
    if isinstance(rows, pd.DataFrame):  # per-position series (the logits plot's) stay in the record, not here
        rows = rows.drop(columns=[c for c in rows.columns if str(c).endswith("_by_position")])
    payload = {"command": summary.get("command"), "verdict": summary.get("verdict"), "facts": summary.get("facts", {}),
               "rows": rows.to_dict(orient="records") if isinstance(rows, pd.DataFrame) else [], **extra}
    return json.dumps(_plain(payload), indent=1, default=str)


def _plain(value):
    """`value` with NaN / Inf floats as None and numpy scalars as Python ones (strict JSON)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
