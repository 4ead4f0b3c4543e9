"""`glmcheck report` believes no record glmcheck did not write as it is (issues 54, 68): a record edited after it was
written fails its content digest; one forged with its digest recomputed still fails where its verdicts are not what
its rows give (each verdict recomputed with the record's own gate), where its summary's rows are not its rows file's,
or where a verdict is no verdict or a field its tables need is missing. Each is one line naming the field, exit 2.
The sweep's, bench's, selftest's and tasks' records are tampered with where their own tests make them
(test_sweep, test_bench_command, test_selftest, test_tasks)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from glmcheck import cli
from tests.support.tamper import assert_tampering_refused, flip_row, forged, refusal

QUICK = ["--model", "tiny", "--band", "3", "--quiet"]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("records")
    runs = {"layer0": ["layer0", "--tokens", "16", "--backends", "torch_bf16,band:5"],
            "drift": ["drift", "--tokens", "16", "--backends", "torch_bf16"],
            "logits": ["logits", "--tokens", "24", "--backends", "band:5"],
            "firsttoken": ["firsttoken", "--limit", "2", "--backends", "torch_bf16"]}
    for name, args in runs.items():
        assert cli.main([*args, *QUICK, "--out", str(root / name)]) in (0, 1, 3), name
    assert cli.main(["union-stats", "--synthetic", "--mode", "uniform", "--out", str(root / "union-stats")]) == 0
    return root


def _judged_row(record, verdicts=("PASS", "FAIL")) -> int:
    import pandas as pd

    rows = pd.read_parquet(record / "rows.parquet")
    return int(next(i for i, v in enumerate(rows["verdict"]) if v in verdicts))


@pytest.mark.parametrize("command", ["layer0", "drift", "logits"])
def test_a_check_record_edited_or_forged_is_refused(records, tmp_path, capsys, command):
    assert_tampering_refused(records / command, tmp_path, capsys, judged_row=_judged_row(records / command))


def test_a_band_row_passed_off_as_judged_or_a_judged_row_as_a_band_sample_is_refused(records, tmp_path, capsys):
    record = records / "layer0"
    judged = _judged_row(record)

    def hide(frame):  # a FAIL row made unjudged ("-"), as if it were a band sample
        frame = frame.copy()
        frame.loc[judged, "verdict"] = "-"
        return frame

    def hide_copy(data):
        data["rows"][judged]["verdict"] = "-"

    err = refusal(forged(record, tmp_path / "hidden", hide_copy, hide), capsys)
    assert f"row {judged} (" in err and ("give 'PASS'" in err or "give 'FAIL'" in err), err


def test_summary_rows_that_are_not_the_rows_file_are_refused(records, tmp_path, capsys):
    """The seed of issue 68: a layer0 record whose summary.json rows are replaced printed `verdict: FAIL`."""
    def replace(data):
        data["rows"][-1]["verdict"] = "FAIL"

    err = refusal(forged(records / "layer0", tmp_path / "rows", replace), capsys)
    assert "summary.json: rows[" in err and "rows.parquet holds" in err


def test_a_firsttoken_record_whose_backend_rows_lie_is_refused(records, tmp_path, capsys):
    record = records / "firsttoken"
    assert_tampering_refused(record, tmp_path, capsys)

    def flip(data):
        row = next(r for r in data["summary_rows"] if r["verdict"] in ("PASS", "FAIL"))
        row["verdict"] = "PASS" if row["verdict"] == "FAIL" else "FAIL"

    err = refusal(forged(record, tmp_path / "rows", flip), capsys)
    assert "summary.json: summary_rows[" in err and "outcomes and the record's gate give" in err


def test_a_table_command_record_with_a_verdict_it_cannot_have_is_refused(records, tmp_path, capsys):
    """union-stats measures: its verdict is PASS; 'BANANA' exited 1 before issue 68, FAIL is a lie too."""
    assert_tampering_refused(records / "union-stats", tmp_path, capsys)
    banana = forged(records / "union-stats", tmp_path / "banana", lambda s: s.update(verdict="BANANA"))
    assert "verdict 'BANANA' is not one of PASS, FAIL, INCONCLUSIVE" in refusal(banana, capsys)


def test_a_record_without_a_digest_or_with_a_file_added_is_refused(records, tmp_path, capsys):
    def strip(data):
        del data["digest"]

    assert "no digest" in refusal(forged(records / "layer0", tmp_path / "bare", strip, reseal=False), capsys)
    added = forged(records / "layer0", tmp_path / "added")
    (added / "tensors.safetensors").write_bytes(b"\0" * 16)
    assert "tensors.safetensors: a file the record's digest does not name" in refusal(added, capsys)


@pytest.mark.parametrize("edit_summary, edit_rows, words", [
    (lambda s: s.update(verdict="BANANA"), None, "verdict 'BANANA' is not one of PASS, FAIL, INCONCLUSIVE"),
    (None, lambda r: r.drop(columns=["rel_l2"]), "no column 'rel_l2'"),
    (None, lambda r: r.assign(verdict="MAYBE"), "verdict 'MAYBE'"),
])
def test_a_record_without_what_its_tables_need_is_refused(records, tmp_path, capsys, edit_summary, edit_rows, words):
    copy = forged(records / "layer0", tmp_path / "x", edit_summary, edit_rows)
    assert words in refusal(copy, capsys)


@pytest.mark.parametrize("edit, words", [
    (lambda s: s["summary_rows"][0].pop("agree"), "summary_rows[0] has no field 'agree'"),
    (lambda s: s.update(summary_rows="x"), "summary_rows is not a list of objects"),
])
def test_a_firsttoken_record_without_its_fields_is_refused(records, tmp_path, capsys, edit, words):
    assert words in refusal(forged(records / "firsttoken", tmp_path / "x", edit), capsys)


def test_plots_skip_a_tampered_record(records, tmp_path):
    from glmcheck.records.plots import write_plots

    forged(records / "layer0", tmp_path / "lie" / "layer0", *flip_row(_judged_row(records / "layer0")))
    skipped = []
    assert write_plots(tmp_path / "lie", lambda path, why: skipped.append(why)) == []
    assert skipped and skipped[0].startswith("refused: rows.parquet: row")


def test_a_closed_pipe_ends_report_quietly(records):
    process = subprocess.Popen([sys.executable, "-m", "glmcheck", "report", str(records / "layer0")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader went away before a line was written (`| head -0`)
    err = process.communicate(timeout=120)[1].decode()
    assert process.returncode == 141 and "Traceback" not in err and "BrokenPipe" not in err, err
