"""Tampered copies of a record, as a hostile user would make them, and the assertion that `glmcheck report` refuses
each in one line naming the field (exit 2): an edit that leaves the digest stale, and edits that forge the digest
too (a verdict the rows do not give, a row whose verdict its statistics do not give)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from glmcheck import cli
from glmcheck.records.digest import file_sha256, summary_sha256

OTHER = {"PASS": "FAIL", "FAIL": "PASS", "INCONCLUSIVE": "PASS"}


def forged(record: Path, into: Path, edit_summary: Callable[[dict], None] | None = None,
           edit_rows: Callable[[pd.DataFrame], pd.DataFrame] | None = None, *, reseal: bool = True) -> Path:
    """A copy of `record` in `into` with the edits made; `reseal` recomputes its digest as a forger would."""
    shutil.copytree(record, into)
    summary = json.loads((into / "summary.json").read_text())
    if edit_rows is not None:
        rows = edit_rows(pd.read_parquet(into / "rows.parquet"))
        rows.to_parquet(into / "rows.parquet")
        if reseal:
            summary["digest"]["rows.parquet"] = file_sha256(into / "rows.parquet")
    if edit_summary is not None:
        edit_summary(summary)
    if reseal:
        summary["digest"]["summary.json"] = summary_sha256(summary)
    (into / "summary.json").write_text(json.dumps(summary))
    return into


def refusal(record: Path, capsys) -> str:
    """The one line `glmcheck report` refuses `record` with (asserting exit 2, one line, no output)."""
    capsys.readouterr()
    code = cli.main(["report", str(record)])
    out, err = capsys.readouterr()
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, (code, out, err)
    return err


def flip_row(index: int, summary_copy: bool = True) -> tuple[Callable, Callable]:
    """(edit_summary, edit_rows) turning row `index`'s verdict into another, in rows.parquet and (when the summary
    keeps a copy of the rows) in summary.json alike."""

    def rows(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        frame.loc[index, "verdict"] = OTHER[frame.loc[index, "verdict"]]
        return frame

    def summary(data: dict) -> None:
        if summary_copy and isinstance(data.get("rows"), list):
            data["rows"][index]["verdict"] = OTHER[data["rows"][index]["verdict"]]

    return summary, rows


def assert_tampering_refused(record: Path, tmp: Path, capsys, judged_row: int | None = None) -> None:
    """`record` reports as written; a verdict edited without the digest, a verdict forged with it, and (given
    `judged_row`, a row with a verdict) that row's verdict forged in both files are each refused naming the field."""
    capsys.readouterr()
    assert cli.main(["report", str(record)]) in (0, 1, 3), "the record as written renders"
    verdict = json.loads((record / "summary.json").read_text())["verdict"]

    def other_verdict(data: dict) -> None:
        data["verdict"] = OTHER[verdict]

    stale = forged(record, tmp / "stale", other_verdict, reseal=False)
    assert "summary.json: its content does not match its digest" in refusal(stale, capsys)
    lie = forged(record, tmp / "lie", other_verdict)
    assert f"summary.json: verdict '{OTHER[verdict]}', but its rows give '{verdict}'" in refusal(lie, capsys)
    if judged_row is not None:
        row = forged(record, tmp / "row", *flip_row(judged_row))
        assert f"row {judged_row} (" in refusal(row, capsys)
