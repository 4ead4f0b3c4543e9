"""`glmcheck report` refuses a record that glmcheck did not write as it is (a verdict that is no verdict, rows
without the fields its tables need) with one line naming the field and exit 2, and stops quietly when the
reader of its output goes away (issue 54)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from glmcheck import cli


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("records")
    for command, extra in (("layer0", []), ("firsttoken", ["--limit", "1"])):
        assert cli.main([command, "--model", "tiny", "--backends", "torch_bf16", "--quiet", "--out", str(root / command),
                         *extra]) in (0, 1, 3)
    return root


def _tampered(records, tmp_path, command: str, edit_summary=None, edit_rows=None):
    copy = tmp_path / command
    shutil.copytree(records / command, copy)
    if edit_summary:
        summary = json.loads((copy / "summary.json").read_text())
        edit_summary(summary)
        (copy / "summary.json").write_text(json.dumps(summary))
    if edit_rows:
        rows = pd.read_parquet(copy / "rows.parquet")
        edit_rows(rows).to_parquet(copy / "rows.parquet")
    return copy


def _drop_agree(summary):
    del summary["summary_rows"][0]["agree"]


@pytest.mark.parametrize("command, edit_summary, edit_rows, words", [
    ("layer0", lambda s: s.update(verdict="BANANA"), None, "verdict 'BANANA' is not one of PASS, FAIL, INCONCLUSIVE"),
    ("layer0", None, lambda r: r.drop(columns=["rel_l2"]), "no column 'rel_l2'"),
    ("layer0", None, lambda r: r.assign(verdict="MAYBE"), "verdict 'MAYBE'"),
    ("firsttoken", _drop_agree, None, "summary_rows[0] has no field 'agree'"),
    ("firsttoken", lambda s: s.update(summary_rows="x"), None, "summary_rows is not a list of objects"),
])
def test_a_tampered_record_is_refused_in_one_line(records, tmp_path, capsys, command, edit_summary, edit_rows,
                                                  words):
    assert cli.main(["report", str(records / command)]) in (0, 1, 3), "the record as written renders"
    capsys.readouterr()
    copy = _tampered(records, tmp_path, command, edit_summary, edit_rows)
    code = cli.main(["report", str(copy)])
    out, err = capsys.readouterr()
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and words in err, err


def test_a_closed_pipe_ends_report_quietly(records):
    process = subprocess.Popen([sys.executable, "-m", "glmcheck", "report", str(records / "layer0")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader went away before a line was written (`| head -0`)
    err = process.communicate(timeout=120)[1].decode()
    assert process.returncode == 141 and "Traceback" not in err and "BrokenPipe" not in err, err
