"""What a practitioner expects of glmcheck's output and packaging (issue 73): the sweep as one table (a length read
down a column across backends), the record path absolute, `render()` equal to what the CLI prints, each command's
--help short with the models described once, plots whose titles and legends say what is drawn, package data limited
to what the code reads and classifiers that match requires-python."""

from __future__ import annotations

import contextlib
import io
import re
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from glmcheck import cli
from glmcheck.records.render import render

ROOT = Path(__file__).resolve().parents[1]


def _sweep_record(onset: int | None) -> tuple[dict, pd.DataFrame]:
    rows = []
    for tokens in (32, 64, 128, 256):
        late = 0.0 if onset is None or tokens < onset else 0.5
        for backend, role, distance in (("reference (rerun)", "band", 0.0), ("band:0", "band", 1e-4),
                                        ("triton_sparse_mla", "judged", 0.0), ("late", "judged", late)):
            out = role == "judged" and distance > 0
            rows.append({"comparison": f"{backend} vs reference", "backend": backend, "role": role, "tokens": tokens,
                         "distance": distance, "band_max": 2e-4, "limit": 0.02, "exceed": distance, "out": out,
                         "verdict": ("FAIL" if out else "PASS") if role == "judged" else "-", "note": ""})
    onsets = {"triton_sparse_mla": {"onset": None, "stays_out": False, "max_distance": 0.0, "verdict": "PASS"},
              "late": {"onset": onset, "stays_out": onset is not None, "max_distance": 0.5 if onset else 0.0,
                       "verdict": "FAIL" if onset else "PASS"}}
    summary = {"command": "sweep", "verdict": "FAIL" if onset else "PASS", "onsets": onsets,
               "facts": {"statistic": "positions", "lengths": [32, 64, 128, 256], "source": "in process",
                         "gate_ratio": 2.0, "gate": "the all-position gate"}}
    return summary, pd.DataFrame(rows)


def test_the_sweep_is_one_table_a_length_a_column():
    summary, rows = _sweep_record(128)
    text = render(summary, rows)
    tables = [block for block in text.split("\n\n") if "| row " in block]
    assert len(tables) == 2  # the lengths table and the onsets table, no stacked parts of one
    header = tables[0].splitlines()[1] if not tables[0].startswith("|") else tables[0].splitlines()[0]
    assert [c.strip() for c in header.strip("|").split("|")] == ["row", "32", "64", "128", "256"]
    names = [line.split("|")[1].strip() for line in tables[0].splitlines() if line.startswith("| ")][1:]
    assert names[:2] == ["band max mean KL", "limit beyond"] and "late" in names and "triton_sparse_mla" in names


def test_the_sweep_plot_draws_what_its_title_says(tmp_path):
    from glmcheck.records.plots import plot_sweep
    from glmcheck.records.store import Record

    for onset in (None, 128):
        summary, rows = _sweep_record(onset)
        fig = plot_sweep(Record(tmp_path, summary, rows))
        ax = fig.axes[0]
        assert ("dashed: onset" in ax.get_title()) == (onset is not None), ax.get_title()
        dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
        assert len(dashed) == (1 if onset else 0)
        floor = ax.get_ylim()[0]
        zeros = [line for line in ax.get_lines() if line.get_label() == "triton_sparse_mla (PASS)"]
        assert zeros and all(y > floor for y in zeros[0].get_ydata())  # zeros drawn above the axis, not on it
        xs = {line.get_label(): tuple(line.get_xdata()) for line in ax.get_lines() if "(" in line.get_label()}
        assert len(set(xs.values())) == len(xs)  # two rows at the same values do not hide each other


def test_the_firsttoken_plot_counts_its_prompts_and_flips_are_not_fail_red(tmp_path):
    from glmcheck.records.plots import FLIP_COLOR, VERDICT_COLORS, plot_firsttoken
    from glmcheck.records.store import Record

    rows = pd.DataFrame([{"prompt_id": f"p{i}", "backend": b, "dlogprob": 0.01, "agree": i != 1 or b == "band:0",
                          "ref_gap": 0.05} for i in range(3) for b in ("band:0", "kernel")])
    summary = {"command": "firsttoken", "summary_rows": [{"backend": "kernel", "verdict": "PASS"}],
               "facts": {"prompt_set": "natural50", "tie_gap": 0.1}}
    fig = plot_firsttoken(Record(tmp_path, summary, rows))
    assert "3 prompts of natural50" in fig._suptitle.get_text()
    flips = [c for c in fig.axes[1].collections if c.get_offsets().shape[0] and c.get_sizes()[0] == 40]
    colors = {tuple(c.get_facecolor()[0]) for c in flips}
    from matplotlib.colors import to_rgba
    assert colors == {to_rgba(FLIP_COLOR)} and to_rgba(VERDICT_COLORS["FAIL"]) not in colors


def test_the_record_path_is_printed_absolute_and_render_is_what_the_cli_prints(tmp_path, monkeypatch):
    from glmcheck.evaluate import CheckOptions, layer0

    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["layer0", "--model", "tiny", "--tokens", "24", "--backends", "band:5", "--quiet",
                         "--out", "rel"]) == 0
    lines = printed.getvalue().splitlines()
    assert lines[-1] == f"record: {tmp_path / 'rel'}"
    library = layer0(CheckOptions(model="tiny", backends=["band:5"], quiet=True), tokens=24).render()
    assert "\n".join(lines[:-1]) == library.rstrip("\n")
    readme = (ROOT / "README.md").read_text()
    assert "print(report.render())  # what `glmcheck layer0 --backends triton_sparse_mla --tokens 64 --quiet` prints" \
        in readme and 'layer0(CheckOptions(model="ref-cpu", backends=["triton_sparse_mla"], quiet=True), tokens=64)' \
        in readme


@pytest.mark.parametrize("command", ["layer0", "logits", "firsttoken", "drift", "sweep", "serve", "tasks"])
def test_each_help_is_short_and_names_no_preset_description(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    assert len(text.splitlines()) <= 66, len(text.splitlines())
    assert "seeded dummy weights" not in text and "GLM-5.2 indexer schedule" not in text
    if command in ("logits", "sweep"):
        assert "--gate-ratio" not in text and "--max-rel-l2" not in text  # refused there: not offered
    if command == "firsttoken":
        assert "the sweep" not in text and "layer0:" not in text  # --band's cost for this command only


def test_the_models_are_described_once_in_glmcheck_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "models (--model):" in text and text.count("seeded dummy weights") == 4 and "ref-cpu: trained" in text


def test_packaging_claims_what_is_tested_and_ships_what_is_read():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    minimum = re.fullmatch(r">=3\.(\d+)", project["requires-python"]).group(1)
    versions = sorted(int(c.rsplit(".", 1)[1]) for c in project["classifiers"]
                      if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c))
    assert versions[0] == int(minimum), (project["requires-python"], versions)
    assert "openai>=1.0" in " ".join(project["optional-dependencies"]["test"])
    shipped = list((ROOT / "glmcheck" / "data" / "resources").rglob("*.png"))
    assert not shipped, "plots no check reads ship in the wheel"
    assert (ROOT / "evidence" / "training" / "ref-cpu-training_loss.png").is_file()


def test_the_docs_map_llama_cpps_figures_and_say_what_lm_eval_costs():
    checks = (ROOT / "docs" / "checks.md").read_text()
    for name in ("Mean PPL(Q)", "Mean ln(PPL(Q)/PPL(base))", "Mean KLD", "99.9% KLD", "Maximum KLD", "Mean Δp",
                 "Same top p"):
        assert f"`{name}" in checks, name
    tasks = " ".join((ROOT / "docs" / "tasks.md").read_text().split())
    assert "## What lm-eval against serve costs" in tasks
    assert re.search(r"On a GPU \(an? [HA]\d+", tasks), "the GPU's figure names the card it was measured on"
    assert re.search(r"\| `triton_sparse_mla` \| \d+ s \| [\d.]+ s \| [\d.]+ \|", tasks)  # the GPU table's row
    assert "bash scripts/time_lm_eval_serve.sh ref-gpu triton_sparse_mla 20" in tasks
    assert re.search(r"`triton_sparse_mla` \(a program a token\) \| [\d.]+ \| \d+ s \(\d", tasks)
