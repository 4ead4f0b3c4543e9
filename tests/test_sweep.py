"""The length sweep (`glmcheck sweep`, glmcheck.checks.sweep and position_sweep): its grid, the endpoint sweep's
distance, onsets, and an in-process run on the trained CPU model (one forward per row, positions binned by length)
that finds a fault firing past position 100 in the bin that holds it while a legitimate kernel stays in the band."""

from __future__ import annotations

import math
import re

import pytest
import torch

from glmcheck import cli
from glmcheck.checks.distributions import FullDistribution, TopKDistribution, topk_distance
from glmcheck.checks.sweep import geometric_lengths, onsets, parse_token_range, window_distance
from glmcheck.evaluate import CheckOptions, sweep
from glmcheck.records.plots import write_plots
from glmcheck.records.store import read_record
from tests.support.late_fault import LATE_FROM
from tests.support.tamper import assert_tampering_refused

LATE = "late=tests/support/late_fault.py:late_fault"


def test_grid():
    assert geometric_lengths(1024, 65536) == [1024, 2048, 4096, 8192, 16384, 32768, 65536]
    assert geometric_lengths(1000, 5000) == [1000, 2000, 4000, 5000]
    assert geometric_lengths(32, 64, per_octave=2) == [32, 45, 64]
    assert geometric_lengths(7, 7) == [7]
    assert parse_token_range("32..512") == (32, 512)
    for bad in ("512", "a..b", "1..2..3", ""):
        with pytest.raises(ValueError, match=r"--tokens must be A\.\.B"):
            parse_token_range(bad)
    for first, last in ((0, 8), (9, 8)):
        with pytest.raises(ValueError, match=r"--tokens must be A\.\.B"):
            geometric_lengths(first, last)
    with pytest.raises(ValueError, match="--per-octave"):
        geometric_lengths(8, 16, per_octave=0)


def test_topk_distance_full_and_listed():
    ref = FullDistribution.from_logits(torch.tensor([3.0, 2.0, 1.0, 0.0]))
    same = FullDistribution.from_logits(torch.tensor([3.0, 2.0, 1.0, 0.0]))
    assert topk_distance(same, ref, 2) == (0.0, 0)
    moved = FullDistribution.from_logits(torch.tensor([3.0, 2.5, 1.0, 0.0]))
    expected = sum(abs(float(moved.logprobs[i] - ref.logprobs[i])) for i in (0, 1)) / 2
    assert topk_distance(moved, ref, 2) == (pytest.approx(expected), 0)
    # a server's top-k list: a token it does not list counts at its last listed logprob (a lower bound)
    listed_ref = TopKDistribution.of([("a", -0.5), ("b", -1.5), ("c", -2.0)])
    row = TopKDistribution.of([("a", -0.6), ("c", -1.9), ("d", -2.5)])
    distance, unlisted = topk_distance(row, listed_ref, 2)
    assert unlisted == 1 and distance == pytest.approx((0.1 + abs(-2.5 + 1.5)) / 2)
    assert math.isnan(topk_distance(row, TopKDistribution.of([]), 2)[0])
    with pytest.raises(ValueError, match="positions"):
        window_distance([row], [listed_ref, listed_ref], 2)


def _row(tokens, backend, out, verdict="PASS"):
    return {"tokens": tokens, "backend": backend, "out": out, "verdict": verdict, "distance": 1.0}


def test_onsets():
    rows = [_row(64, "a", False), _row(128, "a", True, "FAIL"), _row(256, "a", True, "FAIL"),
            _row(64, "b", True, "FAIL"), _row(128, "b", False), _row(256, "b", None, "INCONCLUSIVE"),
            _row(64, "c", False), _row(128, "c", None, "INCONCLUSIVE"),
            _row(64, "d", False), _row(128, "d", False)]
    found = onsets(rows, ["a", "b", "c", "d"])
    assert found["a"] == {"onset": 128, "stays_out": True, "verdict": "FAIL", "max_distance": 1.0}
    assert found["b"]["onset"] == 64 and not found["b"]["stays_out"] and found["b"]["verdict"] == "FAIL"
    assert found["c"]["onset"] is None and found["c"]["verdict"] == "INCONCLUSIVE"
    assert found["d"]["verdict"] == "PASS"


def test_sweep_finds_a_late_fault_at_its_length(tmp_path):
    """ref-cpu, 32..256 tokens, one forward per row: the fault firing from position 100 on is out from the bin of
    lengths 65..128 (the one holding position 100) and stays out; band:9, a legitimate kernel held out of the band of 8,
    is never out. Resuming the finished run recomputes nothing; report --plots draws the sweep."""
    options = CheckOptions(model="ref-cpu", backends=["band:9", LATE], quiet=True)
    report = sweep(options, tokens=(32, 256), record_dir=tmp_path / "s")
    assert report.verdict == "FAIL"
    found = report.extra["onsets"]
    assert found["late"]["onset"] == 128 and found["late"]["stays_out"], found
    assert LATE_FROM < 128 and found["band:9"]["onset"] is None and found["band:9"]["verdict"] != "FAIL", found
    assert {r["tokens"] for r in report.rows} == {32, 64, 128, 256}
    assert report.facts["forwards"] == 1 + 8 + 2 and len(report.facts["band"]) == 8
    assert {r["positions"] for r in report.rows} == {32, 64, 128}
    # the rerun: two forwards over the first bin's 32 tokens, bit for bit on the CPU; reported there only
    rerun = {r["tokens"]: r for r in report.rows if r["backend"].endswith("(rerun)")}
    assert report.facts["short_forwards"] == 2 and rerun[32]["distance"] == 0.0, rerun
    assert all(math.isnan(rerun[n]["distance"]) and "first 32 positions" in rerun[n]["note"] for n in (64, 128, 256))
    # one table, a row per band statistic and backend, a column per length (issue 73): the rerun's row
    rerun_line = next(line for line in report.render().splitlines() if line.startswith("| ")
                      and "(rerun)" in line.split("|")[1])
    rerun_cells = [cell.strip() for cell in rerun_line.split("|")[2:6]]
    assert rerun_cells[0].startswith("0.000e+00") and rerun_cells[1:] == ["-"] * 3, rerun_cells
    asked = sweep(CheckOptions(model="ref-cpu", backends=["band:5"], band=4, quiet=True), tokens=(32, 64))
    assert asked.facts["band"] == [f"band:{k}" for k in range(4)], "--band given: the sweep keeps it"
    report.write(report.record_dir)
    again = sweep(options, tokens=(32, 256), record_dir=tmp_path / "s")
    assert again.facts["resumed_items"] == 4 and again.extra["onsets"] == found
    assert [p.name for p in write_plots(tmp_path)] == ["plot-sweep.png"]


def test_sweep_cli(tmp_path, capsys):
    code = cli.main(["sweep", "--tokens", "24..48", "--backends", "band:9", "--quiet",
                     "--out", str(tmp_path / "c")])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "length sweep, in process" in printed and "| band:9 | - " in printed
    assert read_record(tmp_path / "c").summary["onsets"]["band:9"]["verdict"] == "PASS"
    assert cli.main(["report", str(tmp_path / "c")]) == 0
    rows = read_record(tmp_path / "c").rows
    judged = int(rows.index[rows["role"] == "judged"][0])
    assert_tampering_refused(tmp_path / "c", tmp_path, capsys, judged_row=judged)  # issue 68


@pytest.mark.parametrize("args, message", [
    (["--tokens", "64"], "--tokens must be A..B"),
    (["--tokens", "64..32"], "--tokens must be A..B"),
    (["--gate-ratio", "3"], "--gate-ratio applies to layer0, drift and firsttoken; the sweep judges every position"),
    (["--logprobs", "21"], r"--logprobs must be in \[1, 20\]"),
    (["--backends", "hf_sdpa,band:9"], "attend densely"),
])
def test_sweep_bad_usage(args, message, capsys, tmp_path):
    code = cli.main(["sweep", *args, "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert not (tmp_path / "x").exists()
