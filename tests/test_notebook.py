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
    # layer0, drift, firsttoken, logits, and one union plot per union-stats record (calibrated, uniform)
    assert len(images) >= 6, f"expected the five kinds of figure, got {len(images)} images"


def test_the_notebook_opens_on_the_shipped_sample_of_todays_backends():
    """issue 73: the default is the sample the package ships (found from a wheel as from a clone), made on the
    default trained model with today's backends, and it does not open on a FAIL."""
    from glmcheck.backends import backend_names
    from glmcheck.records.store import read_record

    notebook = nbformat.read(ROOT / "notebooks" / "drift.ipynb", as_version=4)
    assert "RESULTS = None" in notebook.cells[1].source
    assert SAMPLE.is_relative_to(Path(__import__("glmcheck").__file__).parent)  # package data
    for name in ("layer0", "drift", "logits", "firsttoken"):
        record = read_record(SAMPLE / name)
        assert record.summary["model"].get("trained") == "ref-cpu" and record.summary["verdict"] == "PASS", name
        used = {b.split(":")[0] if not b.startswith("band:") else "band" for b in record.rows["backend"]}
        known = {b.split(":")[0] for b in backend_names()} | {"band", "reference (rerun)"}
        assert used <= known | {b for b in used if b.startswith("hf_") or b.endswith("(rerun)")}, used


def test_report_plots_writes_pngs(tmp_path):
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "sample")
    written = write_plots(tmp_path / "sample")
    kinds = {p.name for p in written}
    assert kinds >= {"plot-layer0.png", "plot-drift.png", "plot-firsttoken.png", "plot-union-stats.png",
                     "plot-logits.png"}
    assert all(p.stat().st_size > 5000 for p in written)
