"""Output for a terminal (issue 58, item 4): the default tables fit 120 columns with numbered notes; --format md,
wide and json give the rest."""

from __future__ import annotations

import json

import pandas as pd

from glmcheck import cli
from glmcheck.commands.output_format import FORMATS
from glmcheck.records import render as record_render
from glmcheck.records.tables import Table
from glmcheck.records.terminal import Notes, fit, wrap

WIDTH = 120


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def too_long(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


def test_layer0_and_firsttoken_fit_120_columns_by_default(tmp_path, capsys):
    """The README's main command (ref-cpu) and the wheel test's firsttoken, as printed."""
    code, printed, _ = run_cli(["layer0", "--quiet", "--out", str(tmp_path / "l0")], capsys)
    assert code == 0, printed
    assert not too_long(printed), too_long(printed)
    assert "| triton_sparse_mla " in printed and "gate: PASS when" in printed and "verdict: PASS" in printed
    code, printed, _ = run_cli(["firsttoken", "--prompts", "natural50", "--limit", "2", "--quiet",
                                "--out", str(tmp_path / "ft")], capsys)
    assert code == 0, printed
    assert not too_long(printed), too_long(printed)
    assert "| rerun (band) " in printed and "verdict: PASS" in printed
    for form in ("md", "wide"):  # the rest, from the record
        code, shown, _ = run_cli(["report", str(tmp_path / "l0"), "--format", form], capsys)
        assert code == 0 and "noise band: reference vs itself (rerun)" in shown and "| cosine " in shown
    code, shown, _ = run_cli(["report", str(tmp_path / "ft"), "--format", "json"], capsys)
    payload = json.loads(shown)
    assert payload["command"] == "firsttoken" and payload["verdict"] == "PASS"
    assert len(payload["rows"]) == 2 * 10 and {"backend", "prompt_id"} <= set(payload["rows"][0])
    assert {r["backend"] for r in payload["summary_rows"]} >= {"triton_sparse_mla"}


def test_json_on_stdout_of_a_check_is_json_alone(tmp_path, capsys):
    code, printed, err = run_cli(["layer0", "--model", "tiny", "--tokens", "32", "--quiet", "--backends",
                                  "band:5", "--format", "json", "--out", str(tmp_path / "j")], capsys)
    assert code == 0
    payload = json.loads(printed)
    assert payload["verdict"] == "PASS" and payload["facts"]["tokens"] == 32
    assert all(r["cosine"] is None or isinstance(r["cosine"], float) for r in payload["rows"])
    assert f"record: {tmp_path / 'j'}" in err


def test_the_cli_formats_are_the_renderers():
    assert FORMATS == record_render.FORMATS


def test_a_wide_table_drops_optional_columns_then_splits_repeating_its_key():
    headers = ["row", "a", "b", "c", "note"] + [f"col{i}" for i in range(12)]
    rows = [[f"backend{i}", "1.000e-03", "2.000e-03", "3.000e-03", "a long reason " * 12]
            + [f"{i}.{j}e-04" for j in range(12)] for i in range(3)]
    notes = Notes()
    lines = fit(Table(headers, rows, note="note", optional=("b",)), notes)
    assert all(len(line) <= WIDTH for line in lines), lines
    assert "not shown: b (--format wide shows every column)" in lines
    assert sum(line.startswith("| row ") for line in lines) >= 2, "split in parts, each with the key column"
    assert notes.flush() == wrap("[1] " + "a long reason " * 12, WIDTH, indent=4)
    assert sum("[1]" in line for line in lines if line.startswith("| backend")) == 3


def test_an_over_long_cell_becomes_a_note_and_a_long_key_is_cut():
    notes = Notes()
    lines = fit(Table(["row", "token"], [["k" * 200, "'" + "x" * 60 + "'"]]), notes)
    assert all(len(line) <= WIDTH for line in lines), lines
    assert "..." in lines[2] and "[1]" in lines[2]
    assert notes.flush()[0].startswith("[1] token: 'xxx")


def _record(command: str, summary: dict, rows: list[dict]) -> tuple[dict, pd.DataFrame]:
    return {"command": command, "verdict": "FAIL", "facts": {"gate": "a rule " * 40}, **summary}, pd.DataFrame(rows)


def test_sweep_and_tasks_tables_fit_too():
    names = [f"backend_with_a_long_name_{i}" for i in range(8)]
    rows = [{"tokens": t, "backend": n, "distance": 1e-3, "band_max": 1e-3, "limit": 2e-3, "out": False,
             "verdict": "PASS", "role": "judged"} for t in (1024, 2048) for n in names]
    onsets = {n: {"onset": None, "verdict": "PASS", "max_distance": 1e-3, "stays_out": False} for n in names}
    summary, frame = _record("sweep", {"onsets": onsets, "facts": {"k": 5, "window": 1, "gate": "g " * 80}}, rows)
    text = record_render.render(summary, frame)
    assert not too_long(text) and all(n in text for n in names), text
    row = {"task": "heldout_mc", "candidate": "a_candidate_server", "n": 400, "reference_accuracy": 0.5,
           "candidate_accuracy": 0.49, "difference": -0.01, "interval_low": -0.03, "interval_high": 0.01,
           "table_only_reference": 12, "table_only_candidate": 8, "p_one_sided_drop": 0.25,
           "control_difference": 0.0, "detectable_drop": 0.03, "needed_questions": 900, "verdict": "INCONCLUSIVE",
           "reason": "the interval reaches below the largest acceptable drop " * 3}
    summary, frame = _record("tasks", {"warnings": ["w " * 100]}, [row])
    text = record_render.render(summary, frame)
    assert not too_long(text) and "| a_candidate_server " in text and "[1] the interval" in text, text
    assert len(record_render.render(summary, frame, "wide").splitlines()[2]) > WIDTH  # the wide form keeps every column
