"""`glmcheck tasks` (issue 42): lm-evaluation-harness's multiple-choice task over the reference corpus's held-out
text (`glmcheck_heldout_mc`) against `glmcheck serve` processes of the trained CPU model: the reference (asked
again as its control), a legitimate kernel, a planted fault. A legitimate kernel PASSes, the fault FAILs, a run
cut to 20 questions is INCONCLUSIVE and says how many questions it would need (80 questions and a 10-point
--max-drop keep the run to a few minutes here; 1 point, the default, takes about 700 identical answers);
`tasks compare` judges the sample logs the run kept, alike. The kernel under test itself (`triton_sparse_mla`)
takes 6-7 s a forward in Triton's CPU interpreter, so here the legitimate kernel is the held-out band variant
band:5; on a GPU `scripts/gpu_tasks.sh` serves every built-in backend."""

from __future__ import annotations

import json

import pytest

from glmcheck import cli
from glmcheck.evaluate import CheckOptions, tasks
from glmcheck.records.plots import write_plots
from tests.support.servers import Servers

FAULT = "fault=tests/support/server_faults.py:rope_dropped"
TASK = "glmcheck_heldout_mc"


@pytest.fixture(scope="module")
def servers():
    running = Servers()
    try:
        running.start({"ref": "reference", "kernel": "band:5", "fault": FAULT})
        yield running
    finally:
        running.stop_all()


def test_kernel_passes_fault_fails_and_compare_agrees(servers, tmp_path, capsys):
    out = tmp_path / "t"
    code = cli.main(["tasks", "--endpoint", servers.spec("ref"), "--endpoint", servers.spec("kernel"),
                     "--endpoint", servers.spec("fault"), "--tasks", TASK, "--limit", "80", "--max-drop", "10",
                     "--quiet", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 1, printed
    summary = json.loads((out / "summary.json").read_text())
    verdicts = {r["candidate"]: r for r in summary["rows"]}
    assert verdicts["kernel"]["verdict"] == "PASS", verdicts["kernel"]
    assert verdicts["fault"]["verdict"] == "FAIL", verdicts["fault"]
    assert verdicts["fault"]["difference"] < -0.10 and verdicts["fault"]["p_one_sided_drop"] < 0.05
    assert verdicts["kernel"]["control_difference"] == 0  # the reference reruns bit for bit here
    assert summary["facts"]["accuracies"]["ref"][TASK] > 0.4, "the trained model is well above chance (0.25)"
    assert "task accuracy, paired question by question" in printed and "| kernel " in printed
    # the sample logs kept in the record, judged again by `tasks compare`
    logs = out / "samples"
    code = cli.main(["tasks", "compare", str(logs / "ref"), str(logs / "kernel"), str(logs / "fault"),
                     "--max-drop", "10", "--quiet", "--out", str(tmp_path / "c")])
    again = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert code == 1 and [r["verdict"] for r in again["rows"]] == ["PASS", "FAIL"]
    assert [r["p_one_sided_drop"] for r in again["rows"]] == [r["p_one_sided_drop"] for r in summary["rows"]]
    assert [p.name for p in write_plots(out)] == ["plot-tasks.png"]
    assert cli.main(["report", str(out)]) == 1


def test_twenty_questions_are_inconclusive_with_the_questions_needed(servers):
    report = tasks([servers.spec("ref"), servers.spec("kernel")], [TASK], tokenizer=CheckOptions(model="ref-cpu"),
                   limit=20, quiet=True)
    row = report.rows[0]
    assert report.verdict == "INCONCLUSIVE" and row["verdict"] == "INCONCLUSIVE", row
    assert row["n"] == 20 and row["needed_questions"] > 20 and str(row["needed_questions"]) in row["reason"], row


@pytest.mark.parametrize("args, message", [
    (["--endpoint", "ref=http://127.0.0.1:9"], "--endpoint: name the reference server first"),
    (["--endpoint", "a=http://127.0.0.1:9", "--endpoint", "b=http://127.0.0.1:9"], "--tasks: name at least one"),
    (["compare", "a"], "expected 'tasks compare REFERENCE CANDIDATE"),
    (["compare", "a", "b", "--tasks", "x"], "--tasks applies to servers"),
    (["--endpoint", "a=http://x", "--endpoint", "b=http://y", "--tasks", "t", "--max-drop", "100"], "--max-drop"),
])
def test_bad_usage_is_one_line(args, message, capsys):
    assert cli.main(["tasks", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err
