"""`glmcheck tasks` (issue 42): lm-evaluation-harness's multiple-choice task over the trained models'
corpus's held-out text (`glmcheck_heldout_mc`) against `glmcheck serve` processes of ref-cpu: the reference (asked
again as its control), a legitimate kernel, a planted fault. A legitimate kernel PASSes, the fault FAILs, and 20
questions are INCONCLUSIVE with the questions it would need (the 80-question run's sample logs cut to their first
20: the answers a 20-question run gives, without a second lm-eval run). 80 questions and a 10-point --max-drop
keep the run to a few minutes here; 1 point, the default, takes about 700 identical answers. `tasks compare`
judges the sample logs the run kept, alike. The kernel under test itself (`triton_sparse_mla`) takes 6-7 s a
forward in Triton's CPU interpreter, so here the legitimate kernel is the held-out band variant band:5; on a GPU
`scripts/gpu_tasks.sh` serves every built-in backend."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from glmcheck import cli
from glmcheck.evaluate import tasks_compare
from glmcheck.records.plots import write_plots
from tests.support.servers import Servers
from tests.support.tamper import assert_tampering_refused

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


@pytest.fixture(scope="module")
def eighty(servers, tmp_path_factory):
    """One CLI run over 80 questions: (exit code, printed, record directory)."""
    out = tmp_path_factory.mktemp("tasks") / "t"
    with pytest.MonkeyPatch.context() as patch:
        printed = io.StringIO()
        patch.setattr(sys, "stdout", printed)
        code = cli.main(["tasks", "--endpoint", servers.spec("ref"), "--endpoint", servers.spec("kernel"),
                         "--endpoint", servers.spec("fault"), "--tasks", TASK, "--limit", "80", "--max-drop", "10",
                         "--quiet", "--out", str(out)])
    return code, printed.getvalue(), out


def test_kernel_passes_fault_fails_and_compare_agrees(eighty, tmp_path, capsys):
    code, printed, out = eighty
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
    assert_tampering_refused(out, tmp_path / "tampered", capsys, judged_row=0)  # the paired rules (issue 68)


def _first_questions(log: Path, into: Path, count: int) -> Path:
    """A copy of the sample-log folder `log` cut to its first `count` questions."""
    into.mkdir(parents=True)
    for file in log.iterdir():
        text = file.read_text()
        if file.suffix == ".jsonl":
            text = "".join(text.splitlines(keepends=True)[:count])
        (into / file.name).write_text(text)
    return into


def test_twenty_questions_are_inconclusive_with_the_questions_needed(eighty, tmp_path):
    """The 80-question run cut to its first 20 questions (no new lm-eval run: CI time)."""
    logs = eighty[2] / "samples"
    ref, kernel = (_first_questions(logs / name, tmp_path / name, 20) for name in ("ref", "kernel"))
    report = tasks_compare(ref, [kernel])
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


def test_a_candidate_with_nan_logits_fails_and_a_dying_one_is_one_line(servers, tmp_path, capfd):
    """A candidate whose kernel emits NaN is a FAIL row (exit 1, record written); one that dies mid-run is one line
    and exit 2, without the tracebacks of the requests its death left behind; nothing half-written."""
    broken = Servers()
    try:
        broken.start({"nan": "faulty=tests/support/server_faults.py:faulty"}, env={"GLMCHECK_TEST_FAULT": "nan@1"})
        broken.start({"dies": "faulty=tests/support/server_faults.py:faulty"}, env={"GLMCHECK_TEST_FAULT": "die@4"})
        base = ["tasks", "--endpoint", servers.spec("ref"), "--tasks", TASK, "--limit", "4"]
        capfd.readouterr()
        code = cli.main([*base, "--endpoint", broken.spec("nan"), "--quiet", "--out", str(tmp_path / "n")])
        printed = capfd.readouterr()
        summary = json.loads((tmp_path / "n" / "summary.json").read_text())
        assert code == 1 and summary["rows"][0]["verdict"] == "FAIL", printed
        assert "non-finite logits" in summary["rows"][0]["reason"] and "| nan " in printed.out
        code = cli.main([*base, "--endpoint", broken.spec("dies"), "--out", str(tmp_path / "d")])
        err = capfd.readouterr().err
    finally:
        broken.stop_all()
    assert code == 2 and "glmcheck tasks: error: endpoint" in err, err
    assert "Traceback" not in err and "never retrieved" not in err, err
    assert not (tmp_path / "d" / "summary.json").exists()


def test_a_metric_the_task_lacks_is_one_line_and_nothing_written(servers, tmp_path, capsys):
    out = tmp_path / "m"
    code = cli.main(["tasks", "--endpoint", servers.spec("ref"), "--endpoint", servers.spec("kernel"), "--tasks", TASK,
                     "--limit", "2", "--metric", "nosuch", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "nosuch" in err, err
    assert not (out / "samples").exists() and not (out / "summary.json").exists()
