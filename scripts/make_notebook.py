"""Regenerate notebooks/drift.ipynb (cells kept here so the notebook diff stays reviewable).

Usage: python scripts/make_notebook.py
"""
import nbformat as nbf

nb = nbf.v4.new_notebook()
cells = []
cells.append(nbf.v4.new_markdown_cell("""# Drift analysis

Where does a backend's error enter, and how does it grow through the model? This notebook reads
glmcheck run records only (it never runs a model) through the library's record reader
(`glmcheck.records.store`) and draws with `glmcheck.records.plots`, the same figures `glmcheck report DIR --plots`
writes. Point `RESULTS` at a directory of records (`glmcheck layer0/drift/firsttoken/logits/union-stats
--out DIR/...`); the default (`None`) is the sample glmcheck ships, made from ref-cpu runs on the CPU by today's
commands (`scripts/make_sample_records.py`; `glmcheck.records.samples.sample_records_dir()`, found from a clone
or an installed wheel alike)."""))
cells.append(nbf.v4.new_code_cell("""# Parameters
RESULTS = None  # a directory of records; None: the sample glmcheck ships
"""))
cells.append(nbf.v4.new_code_cell("""%matplotlib inline
from pathlib import Path

import matplotlib.pyplot as plt

from glmcheck.records.plots import plot_drift, plot_firsttoken, plot_layer0, plot_logits, plot_union
from glmcheck.records.render import render
from glmcheck.records.samples import sample_records_dir
from glmcheck.records.store import find_records, read_record

records = [read_record(d) for d in find_records(Path(RESULTS) if RESULTS else sample_records_dir())]
by_command = {}
for record in records:
    by_command.setdefault(record.summary["command"], []).append(record)
print({command: len(found) for command, found in by_command.items()})"""))
cells.append(nbf.v4.new_markdown_cell("""## 1. Layer-0 error per backend against the noise band
The band: the exact reference against its own rerun and several ideal bf16 kernels (`band:K`); a row
passes within `gate_ratio x` the band's max (grey bars: the band; each judged row marked by its verdict)."""))
cells.append(nbf.v4.new_code_cell("""for record in by_command.get("layer0", []):
    print(render(record.summary, record.rows))
    fig = plot_layer0(record)
    display(fig)
    plt.close(fig)"""))
cells.append(nbf.v4.new_markdown_cell("""## 2. Per-layer drift
rel-L2 of each layer's output hidden state against the reference (log scale), with the band shaded."""))
cells.append(nbf.v4.new_code_cell("""for record in by_command.get("drift", []):
    fig = plot_drift(record)
    display(fig)
    plt.close(fig)"""))
cells.append(nbf.v4.new_markdown_cell("""## 3. First token: |Δ logprob| and near ties
Left: how far each backend moves the logprob of the chosen token on the prompts where it agrees
with the reference. Right: agreement against the reference's top-1/top-2 gap; flips should only
happen left of the tie gap."""))
cells.append(nbf.v4.new_code_cell("""for record in by_command.get("firsttoken", []):
    fig = plot_firsttoken(record)
    display(fig)
    plt.close(fig)"""))
cells.append(nbf.v4.new_markdown_cell("""## 4. Logits: KL per position against the band
KL(reference || row) at every position of the longest prompt: each judged row against the band's envelope (the
largest KL of the ideal bf16 kernels at each position), with llama.cpp's figures in the printed tables."""))
cells.append(nbf.v4.new_code_cell("""for record in by_command.get("logits", []):
    print(render(record.summary, record.rows))
    fig = plot_logits(record)
    display(fig)
    plt.close(fig)"""))
cells.append(nbf.v4.new_markdown_cell("""## 5. Union ratio vs sequence length
How much larger the union of G adjacent tokens' selections is than one token's: what the union
fast path gathers per token (calibrated synthetic indices vs uniform ones, and captured traces)."""))
cells.append(nbf.v4.new_code_cell("""for record in by_command.get("union-stats", []):
    fig = plot_union(record)
    display(fig)
    plt.close(fig)"""))
nb["cells"] = cells
nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, "notebooks/drift.ipynb")
