"""Plots read at a glance (issue 58, item 4): firsttoken gives every backend its own row and marker, layer0 draws
the band's rows and marks each judged row's verdict, and `report --plots` names a record it cannot plot."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

from glmcheck import cli
from glmcheck.records.plots import plot_drift, plot_firsttoken, plot_layer0, plot_sweep
from glmcheck.records.store import read_record


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("records")
    common = ["--model", "tiny", "--quiet"]
    assert cli.main(["layer0", "--tokens", "48", "--backends", "band:5,torch_bf16,hf_sdpa", "--out",
                     str(root / "layer0")] + common) == 1  # torch_bf16 is outside the band at 48 tokens
    assert cli.main(["firsttoken", "--prompts", "natural50", "--limit", "4", "--backends",
                     "band:5,triton_sparse_mla", "--out", str(root / "firsttoken")] + common) == 0
    assert cli.main(["logits", "--tokens", "24", "--backends", "band:5", "--out", str(root / "logits")] + common) == 0
    assert cli.main(["sweep", "--tokens", "16..32", "--backends", "band:9,torch_bf16", "--out", str(root / "sweep")]
                    + common) in (0, 1, 3)
    assert cli.main(["drift", "--tokens", "24", "--backends", "band:5,torch_bf16", "--out", str(root / "drift")]
                    + common) in (0, 1)
    return root


def test_firsttoken_gives_every_backend_its_own_row_and_marker(records):
    record = read_record(records / "firsttoken")
    fig = plot_firsttoken(record)
    left, right = fig.axes
    names = list(dict.fromkeys(record.rows["backend"]))
    points = left.collections
    assert len(points) == len(names)  # one scatter a backend
    rows = [sorted({round(y) for _, y in c.get_offsets()}) for c in points]
    assert rows == [[len(names) - 1 - i] for i in range(len(names))], "each backend on its own row"
    assert len({c.get_paths()[0].vertices.tobytes() for c in points}) > 1, "markers differ"
    labels = [t.get_text() for t in left.get_yticklabels()]
    assert "triton_sparse_mla (PASS)" in labels and "band:0" in labels
    assert any(line.get_linestyle() == "--" for line in right.lines), "the tie gap drawn"
    plt.close(fig)


def test_layer0_draws_the_band_and_marks_verdicts(records):
    record = read_record(records / "layer0")
    fig = plot_layer0(record)
    ax = fig.axes[0]
    assert len(ax.patches) >= len(record.rows), "a bar for every row, the band's included"
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert sum(label.startswith("band: ") for label in labels) == 5
    marks = {t.get_text() for t in ax.texts}
    assert {"PASS", "FAIL"} <= marks and "0 (bit for bit)" in marks
    assert "FAIL" in ax.get_title()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "the band's rows" in legend and "gate: 2 x the band's max" in legend
    plt.close(fig)


def test_report_plots_names_the_record_it_skips(records, capsys):
    assert cli.main(["report", str(records), "--plots"]) == 0
    captured = capsys.readouterr()
    skipped = [line for line in captured.err.splitlines() if line.startswith("skipped")]
    assert skipped == [], skipped  # every record here has a plot: logits draws KL per position (issue 73)
    assert "plot-layer0.png" in captured.out and "plot-firsttoken.png" in captured.out
    assert "plot-logits.png" in captured.out
    (records / "layer0" / "rows.parquet").rename(records / "rows.parquet.hidden")  # a record that no longer reads
    try:
        assert cli.main(["report", str(records), "--plots"]) == 0
        skipped = [line for line in capsys.readouterr().err.splitlines() if line.startswith("skipped")]
        assert len(skipped) == 1 and skipped[0].startswith(f"skipped {records / 'layer0'}: refused:"), skipped
    finally:
        (records / "rows.parquet.hidden").rename(records / "layer0" / "rows.parquet")


def test_drift_tells_backends_apart_and_names_their_verdicts(records):
    record = read_record(records / "drift")
    fig = plot_drift(record)
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    judged = [label for label in legend if label.startswith(("band:5 (", "torch_bf16 ("))]
    assert len(judged) == 2 and all(label.endswith(("(PASS)", "(FAIL)", "(INCONCLUSIVE)")) for label in judged), legend
    assert "the band's max" in legend and any(label.startswith("gate: ") for label in legend)
    curves = [line for line in ax.lines if line.get_label() in judged]
    assert len({line.get_marker() for line in curves}) == 2, "each backend its own marker"
    assert record.summary["verdict"] in ax.get_title()
    plt.close(fig)


def test_sweep_tells_rows_apart_and_names_their_verdicts(records):
    fig = plot_sweep(read_record(records / "sweep"))
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    judged = [label for label in legend if label.startswith(("band:9", "torch_bf16"))]
    assert len(judged) == 2 and all(label.endswith(")") for label in judged), legend
    assert len({line.get_marker() for line in ax.lines if line.get_label() in judged}) == 2
    plt.close(fig)
