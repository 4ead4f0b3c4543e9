"""Every command a thin layer (issue 72 item 4): kernel-check (formerly selfcheck), backends and plan print the
`Report` one `glmcheck.evaluate` call returns, whose record `glmcheck report` reprints and re-judges (a tampered one
refused); the old name selfcheck still runs, with a one-line notice."""

from __future__ import annotations

import json

from glmcheck import cli
from glmcheck.evaluate import backends_here, kernel_check, memory_plan
from tests.support.tamper import assert_tampering_refused, forged, refusal

SMALL = {"tokens": 8, "heads": 2, "kv_rows": 8, "topk": 8, "d_v": 16, "d_tail": 0, "device": "cpu"}


def _reprinted(report, directory, capsys) -> str:
    """`report` written to `directory`, then `glmcheck report` on it: what it printed (its exit the report's)."""
    report.write(directory)
    capsys.readouterr()
    assert cli.main(["report", str(directory)]) == report.exit_code
    return capsys.readouterr().out


def test_kernel_check_is_a_report_whose_record_is_rejudged(tmp_path, capsys):
    report = kernel_check(**SMALL)
    assert report.command == "kernel-check" and report.verdict == "PASS" and report.exit_code == 0
    assert [row["rule"] for row in report.rows] == ["info", "gate", "bitwise"]
    assert report.options["tokens"] == 8 and report.options["device"] == "cpu"
    printed = _reprinted(report, tmp_path / "kc", capsys)
    assert printed.strip() == report.render().strip() and printed.strip().endswith("PASS")
    assert "kernel-check on cpu: T=8 H=2 S=8 topk=8 d_v=16 d_tail=0 seed=0" in printed
    assert_tampering_refused(tmp_path / "kc", tmp_path, capsys, judged_row=1)


def test_kernel_check_refuses_a_bad_shape_naming_the_argument():
    import pytest

    with pytest.raises(ValueError, match=r"^heads must be an int >= 1, got 0$"):
        kernel_check(heads=0, device="cpu")
    with pytest.raises(ValueError, match=r"^d_tail 12: the rope tail must be 0 or a power of two$"):
        kernel_check(**{**SMALL, "d_tail": 12})


def test_selfcheck_still_runs_under_its_old_name_with_a_notice(capsys):
    argv = ["--tokens", "8", "--heads", "2", "--kv-rows", "8", "--topk", "8", "--d-v", "16", "--d-tail", "0",
            "--device", "cpu"]
    assert cli.main(["selfcheck", *argv]) == 0
    out, err = capsys.readouterr()
    assert err.strip() == "glmcheck selfcheck is deprecated: it is now glmcheck kernel-check (the same options)"
    assert cli.main(["kernel-check", *argv]) == 0
    again, err = capsys.readouterr()
    assert not err and again == out


def test_plan_is_a_report_whose_record_is_rejudged(tmp_path, capsys):
    fits = memory_plan("glm-5.2", tp=8, tokens=4096, weights="fp8")
    assert fits.verdict == "PASS" and [row["path"] for row in fits.rows] == ["absorbed", "hf_sdpa", "hf_eager"]
    assert _reprinted(fits, tmp_path / "fits", capsys).strip() == fits.render().strip()
    assert_tampering_refused(tmp_path / "fits", tmp_path, capsys)
    serving = memory_plan("glm-5.2", tp=8, tokens=4096, weights="fp8", calls="serving")  # its pool in the totals
    assert _reprinted(serving, tmp_path / "serving", capsys).strip() == serving.render().strip()
    full = memory_plan("glm-5.2", tp=1, tokens=4096)
    assert full.verdict == "FAIL" and full.exit_code == 1 and not full.rows[0]["fits"]
    _reprinted(full, tmp_path / "full", capsys)

    def claim_it_fits(rows):
        rows = rows.copy()
        rows.loc[0, "fits"] = True
        return rows

    def and_in_the_summary(summary):
        summary["rows"][0]["fits"] = True
        summary["verdict"] = "PASS"

    lie = forged(tmp_path / "full", tmp_path / "claims-it-fits", and_in_the_summary, claim_it_fits)
    assert "row 0 (absorbed) has fits True; its totals and the record's headroom give False" in refusal(lie, capsys)


def test_backends_is_a_report_whose_record_is_rejudged(tmp_path, capsys):
    report = backends_here(device="cpu", heads=8)
    names = [row["backend"] for row in report.rows]
    assert report.verdict == "PASS" and "reference" in names and "hf_sdpa" in names
    assert next(r for r in report.rows if r["backend"] == "reference")["runs_here"].startswith("yes")
    assert _reprinted(report, tmp_path / "b", capsys).strip() == report.render().strip()
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["command"] == "backends" and summary["options"] == {"backends": [], "device": "cpu", "heads": 8}
    assert_tampering_refused(tmp_path / "b", tmp_path, capsys)
