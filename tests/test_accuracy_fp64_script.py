"""scripts/accuracy_fp64.py (GPU: the bench's backends against the fp64 reference): its point
parsing and the margin it reports, from planted rows."""

from __future__ import annotations

import argparse

import pytest

from tests.script_loader import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("accuracy_fp64")


def test_parse_point_reads_batch_length_heads_and_names_the_form(script):
    point = script.parse_point("2x4096:16")
    assert (point.batch, point.seq_len, point.heads) == (2, 4096, 16)
    for bad in ("1x8192", "1x8192:0", "x8192:64", "1x8192:h"):
        with pytest.raises(argparse.ArgumentTypeError, match="BxS:H"):
            script.parse_point(bad)


def test_report_takes_our_worst_against_flashmlas_best(script, capsys):
    rows = {"per-token": (2.0e-3, 2.1e-3), "union8": (2.5e-3, 2.0e-3),
            "flashmla+len": (2.2e-3, 2.05e-3), "flashmla": (2.4e-3, 1.9e-3)}
    script.report("1x8192 H=64", rows)
    printed = capsys.readouterr().out
    assert "ours worst - FlashMLA best vs fp64: +3.000e-04" in printed  # 2.5e-3 - 2.2e-3
    assert "ours worst - FlashMLA best vs fp32: +2.000e-04" in printed  # 2.1e-3 - 1.9e-3
    assert "1x8192 H=64 union8: rel-L2 vs fp64 2.500000000e-03" in printed
    script.report("no flash", {"per-token": (1e-3, 1e-3)})
    assert "FlashMLA best" not in capsys.readouterr().out
