"""The fields a check's record must hold before it is rendered (`check_record`): a record that lacks one, or holds a
verdict that is not a verdict, was not written by glmcheck (or was edited), and is refused with the field named."""

from __future__ import annotations

import pandas as pd

from glmcheck.checks.band import FAIL, INCONCLUSIVE, INFO, PASS, REHEARSAL

# The fields each command's record must hold, checked before it is rendered: in rows.parquet, and per entry of the
# summary's lists (firsttoken's summary_rows, the sweep's onsets). A record missing one, or holding a verdict that is
# not a verdict, was not written by glmcheck (or was edited): refused, not rendered.
ROW_FIELDS = {"layer0": ("comparison", "backend", "rel_l2", "verdict"),
              "logits": ("comparison", "backend", "tokens", "rel_l2", "verdict"),
              "drift": ("comparison", "backend", "rel_l2", "verdict"),
              "firsttoken": ("prompt_id", "backend"),
              "sweep": ("tokens", "backend", "distance", "band_max", "limit", "out", "verdict"),
              "tasks": ("candidate", "task", "verdict")}
SUMMARY_LIST_FIELDS = {"firsttoken": ("summary_rows", ("comparison", "backend", "agree", "prompts", "mean_dlogprob",
                                                       "max_dlogprob", "wide_flips", "verdict")),
                       "sweep": ("onsets", ("onset", "verdict"))}
VERDICTS = (PASS, FAIL, INCONCLUSIVE, REHEARSAL)


def check_record(summary: dict, rows: pd.DataFrame) -> None:
    """ValueError naming the field when a record of a check lacks a field its tables need or holds a verdict that is
    none of PASS, FAIL, INCONCLUSIVE, REHEARSAL (a row's: also '-')."""
    command = summary.get("command")
    if summary.get("verdict") not in VERDICTS:
        raise ValueError(f"summary.json: verdict {summary.get('verdict')!r} is not one of {', '.join(VERDICTS)}")
    if not isinstance(summary.get("facts", {}), dict):
        raise ValueError("summary.json: facts is not an object")
    missing = [f for f in ROW_FIELDS.get(command, ()) if f not in rows.columns]
    if missing and len(rows):
        raise ValueError(f"rows.parquet: no column {missing[0]!r} (a {command} record's rows need "
                         f"{', '.join(ROW_FIELDS[command])})")
    if "verdict" in rows.columns:
        bad = [v for v in rows["verdict"] if v not in (*VERDICTS, INFO)]
        if bad:
            raise ValueError(f"rows.parquet: verdict {bad[0]!r} is not one of {', '.join((*VERDICTS, INFO))}")
    if command in SUMMARY_LIST_FIELDS:
        key, fields = SUMMARY_LIST_FIELDS[command]
        entries = summary.get(key, [] if key == "summary_rows" else {})
        values = entries.values() if isinstance(entries, dict) else entries
        if not isinstance(entries, (list, dict)) or not all(isinstance(e, dict) for e in values):
            raise ValueError(f"summary.json: {key} is not a list of objects")
        for i, entry in enumerate(values):
            absent = [f for f in fields if f not in entry]
            if absent:
                raise ValueError(f"summary.json: {key}[{i}] has no field {absent[0]!r}")
            if entry["verdict"] not in (*VERDICTS, INFO):
                raise ValueError(f"summary.json: {key}[{i}] has verdict {entry['verdict']!r}, not one of "
                                 f"{', '.join((*VERDICTS, INFO))}")
