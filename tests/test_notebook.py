"""notebooks/drift.ipynb runs on the committed sample records and draws its four figures."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from glmcheck.records.plots import write_plots
from glmcheck.records.samples import sample_records_dir

nbformat = pytest.importorskip("nbformat")  # not on the GPU machine's image
NotebookClient = pytest.importorskip("nbclient").NotebookClient

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = sample_records_dir()


def test_notebook_runs_on_the_sample_and_draws_every_figure():
    notebook = nbformat.read(ROOT / "notebooks" / "drift.ipynb", as_version=4)
    start = time.monotonic()
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    assert time.monotonic() - start < 120
    images = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
              if "image/png" in o.get("data", {})]
    errors = [o for cell in notebook.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    # layer0, drift, firsttoken, and one union plot per union-stats record (calibrated, uniform)
    assert len(images) >= 5, f"expected the four kinds of figure, got {len(images)} images"


def test_report_plots_writes_pngs(tmp_path):
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "sample")
    written = write_plots(tmp_path / "sample")
    kinds = {p.name for p in written}
    assert {"plot-layer0.png", "plot-drift.png", "plot-firsttoken.png", "plot-union-stats.png"} <= kinds
    assert all(p.stat().st_size > 5000 for p in written)
