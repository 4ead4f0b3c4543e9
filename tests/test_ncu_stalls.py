"""scripts/ncu_stalls.py on a small source page shaped like Nsight Compute's (no GPU, no profiler)."""

from __future__ import annotations

import csv
import importlib.util
import pathlib
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "ncu_stalls.py"


def _module():
    spec = importlib.util.spec_from_file_location("ncu_stalls", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page(path: pathlib.Path) -> None:
    """Two partitions (224 and 56 registers); the first waits 30 samples at a try-wait on offset 0x100."""
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
              "stall_long_sb", "stall_barrier", "stall_long_sb (Not Issued)"]
    rows = [
        ("0x10", "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe0", "2", "2", "0", "2", "0"),
        ("0x20", "SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR6+0x100], R20", "1", "1", "1", "0", "1"),
        ("0x30", "HGMMA.64x64x16.F32.BF16 R152, gdesc[UR32], R152", "5", "5", "0", "5", "0"),
        ("0x40", "@!P1  BRA 0x90", "30", "30", "30", "0", "30"),
        ("0x50", "USETMAXREG.DEALLOC.CTAPOOL 0x38", "2", "2", "0", "2", "0"),
        ("0x60", "IMAD R2, R2, UR9, RZ", "60", "60", "60", "0", "60"),
    ]
    with path.open("w", newline="") as handle:
        handle.write('"Kernel Name","k",\n')
        writer = csv.writer(handle, quoting=csv.QUOTE_ALL)
        writer.writerow(header)
        writer.writerows(rows)


def test_partitions_and_waits_from_a_source_page(tmp_path):
    page = tmp_path / "sass.csv"
    _page(page)
    ncu = _module()
    frame = ncu.load(str(page))
    parts = ncu.partitions(frame)
    assert [(a, b, regs) for a, b, regs in parts] == [(0, 0, "launch"), (0, 4, "0xe0"), (4, 6, "0x38")]
    share, index, offset = ncu.waits(frame)[0]
    assert (index, offset) == (3, "0x100")
    assert share == pytest.approx(30 / 100)


def test_the_script_prints_each_partition_and_wait(tmp_path, capsys):
    page = tmp_path / "sass.csv"
    _page(page)
    ncu = _module()
    argv, sys.argv = sys.argv, ["ncu_stalls.py", str(page), "--top", "1"]
    try:
        assert ncu.main() == 0
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    assert "registers 0xe0: 4 instructions (1 HGMMA), 38.0% of samples" in out
    assert "registers 0x38: 2 instructions (0 HGMMA), 62.0% of samples: long_sb 97%" in out
    assert "30.00%  at     3  barrier 0x100" in out
