"""Table cells that do not apply print `-`; a NaN a backend produced still prints `nan` (after the
record's round trip through parquet, which cannot tell the two apart by itself)."""

from __future__ import annotations

import math

import pandas as pd
import torch

from glmcheck.checks.band import FAIL, PASS
from glmcheck.checks.rows import compare, not_called_row
from glmcheck.evaluate.index_unions import ratio_cell as _ratio
from glmcheck.evaluate.selftest_kernels import fmt_measured
from glmcheck.records.render import render
from glmcheck.records.store import read_record, write_record


def _rows():
    g = torch.Generator().manual_seed(0)
    exact = torch.randn(8, 2, 16, generator=g, dtype=torch.float64)
    good = compare("noise band: band:0 vs reference (ideal bf16 kernel)", "band:0", "reference", "latent",
                   exact.bfloat16(), exact, per_token=True)
    broken = exact.clone()
    broken[3, 1, 5] = math.nan
    bad = compare("nan_kernel vs reference", "nan_kernel", "reference", "latent", broken, exact, per_token=True)
    bad.verdict, bad.note = FAIL, "rel_l2 not finite"
    pair = compare("union vs plain (per-token)", "union", "plain", "latent", exact.bfloat16(), exact)  # no per-token
    pair.verdict = PASS
    missing = not_called_row("lazy_kernel", "reference", "latent", 3, 0, tokens=8)
    return [good, bad, pair, missing]


def _rendered(directory, command: str, rows: list[dict]) -> str:
    """The tables of a record written and read back, every column shown (--format wide)."""
    summary = {"command": command, "verdict": FAIL,
               "facts": {"tokens": 8, "baseline": None, "gate": "test", "layers": 1, "band_size": 1}}
    write_record(directory, summary, pd.DataFrame(rows))
    record = read_record(directory)
    return render(record.summary, record.rows, "wide")


def _line(text: str, start: str) -> list[str]:
    line = next(x for x in text.splitlines() if x.startswith(f"| {start}"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_cells_that_do_not_apply_print_a_dash(tmp_path):
    good, _, pair, missing = _rows()
    text = _rendered(tmp_path / "a", "layer0", [good.as_dict(), pair.as_dict(), missing.as_dict()])
    assert "nan" not in text.lower(), text
    assert _line(text, "union vs plain")[3:5] == ["-", "-"], "no token max / scale bias for a per-token pair"
    assert _line(text, "lazy_kernel")[1:6] == ["-"] * 5 and "expected 3 kernel calls" in text
    drift = dict(good.as_dict(), comparison="band:0 vs reference", layer=0)  # no band_max_rel_l2
    text = _rendered(tmp_path / "b", "drift", [drift, missing.as_dict()])
    assert "nan" not in text.lower(), text
    assert _line(text, "lazy_kernel")[1:6] == ["-"] * 5


def test_a_measured_nan_still_shows(tmp_path):
    good, bad, pair, missing = _rows()
    text = _rendered(tmp_path / "a", "layer0", [r.as_dict() for r in (good, bad, pair, missing)])
    cells = _line(text, "nan_kernel")
    assert cells[1:6] == ["nan"] * 5, cells  # cosine, rel L2, token max, scale bias, max abs
    assert "nan" not in " ".join(_line(text, "union vs plain") + _line(text, "lazy_kernel") + _line(text, "noise"))
    legacy = [{k: v for k, v in r.as_dict().items() if k != "nonfinite"} for r in (bad, pair)]
    text = _rendered(tmp_path / "b", "layer0", legacy)
    assert _line(text, "nan_kernel")[2] == "nan" and _line(text, "union vs plain")[3] == "-", \
        "a record without the column: its rel-L2 NaN was measured, a missing per-token cell was not"


def test_other_tables():
    assert _ratio(None) == "-" and _ratio(math.nan) == "-" and _ratio(1.234) == "1.23x"
    assert fmt_measured(math.nan, 3e-3, crashed=True) == "-" and fmt_measured(math.nan, 3e-3) == "nan"
