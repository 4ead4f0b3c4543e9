"""Checks against running servers (issue 41): `glmcheck serve` processes of the trained CPU model (the
reference, a second reference instance, the kernel, planted faults, three band variants) on localhost
ports; firsttoken and the sweep against them give the in-process verdicts; a wrong port, an HTTP 500 and a
server killed mid-run are one line and exit 2 with nothing half-written; SIGINT mid-run and a rerun resume
without asking the servers again for finished prompts."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from glmcheck import cli
from glmcheck.evaluate import CheckOptions, firsttoken, firsttoken_endpoints, logits, sweep, sweep_endpoints
from glmcheck.records.layout import FINGERPRINT_FILE, ITEMS_DIR
from tests.support.servers import Servers
from tests.support.signals import default_sigint

FAULT = "fault=glmcheck.selftest.faults:rope_tail_dropped"
LATE = "late=tests/support/late_fault.py:late_fault"
FAULTY = "faulty=tests/support/server_faults.py:faulty"
BAND = ("b0", "b1", "b2")


@pytest.fixture(scope="module")
def servers():
    running = Servers()
    try:
        running.start({"ref": "reference", "ref2": "reference", "kernel": "triton_sparse_mla", "fault": FAULT,
                       "late": LATE, "b0": "band:0", "b1": "band:1", "b2": "band:2"})
        yield running
    finally:
        running.stop_all()


def _band(servers) -> list[str]:
    return [servers.spec(name) for name in BAND]


def _band_args(specs: list[str]) -> list[str]:
    """--band-endpoint SPEC for each spec, as the command line takes them."""
    return [arg for spec in specs for arg in ("--band-endpoint", spec)]


def _forwards(servers, name: str) -> int:
    return httpx.get(f"{servers.urls[name]}/glmcheck/info", timeout=30).json()["forwards"]


def _items(directory: Path) -> list[Path]:
    return [p for p in (directory / ITEMS_DIR).glob("*.json") if p.name != FINGERPRINT_FILE] \
        if (directory / ITEMS_DIR).exists() else []


def test_firsttoken_against_servers_gives_the_in_process_verdicts(servers, tmp_path):
    remote = firsttoken_endpoints([servers.spec("ref"), servers.spec("kernel"), servers.spec("fault")],
                                  _band(servers), prompts="natural50", limit=3, record_dir=tmp_path / "r",
                                  quiet=True)
    local = firsttoken(CheckOptions(model="ref-cpu", backends=["triton_sparse_mla", FAULT], band=3, quiet=True),
                       prompts="natural50", limit=3)
    assert remote.verdict == local.verdict == "FAIL"
    pairs = list(zip(remote.extra["summary_rows"], local.extra["summary_rows"], strict=True))
    for mine, theirs in pairs:
        assert (mine["verdict"], mine["agree"], mine["wide_flips"]) == \
            (theirs["verdict"], theirs["agree"], theirs["wide_flips"]), (mine, theirs)
    kernel = next((m, t) for m, t in pairs if m["backend"] == "kernel")
    assert kernel[0]["verdict"] == "PASS" and kernel[0]["mean_dlogprob"] == pytest.approx(kernel[1]["mean_dlogprob"],
                                                                                           rel=1e-9, abs=1e-12)
    assert [m["verdict"] for m, _ in pairs if m["backend"] == "fault"] == ["FAIL"]
    servers_seen = remote.model["endpoints"]["servers"]
    assert servers_seen["kernel"]["glmcheck"]["backend"] == "triton_sparse_mla"
    assert servers_seen["ref"]["model"] == "ref-cpu"


def _drawn(err: str, desc: str) -> list[tuple[int, int]]:
    """The (done, total) counts the bar `desc` drew, in order."""
    return [(int(a), int(b)) for a, b in re.findall(rf"{re.escape(desc)}:[^\r\n]*?\| (\d+)/(\d+) ", err)]


def test_the_bar_counts_requests_not_prompts(servers, capsys, monkeypatch):
    """Against servers a request is the forward: firsttoken's bar steps once per prompt and server (the reference
    twice: its rerun), the sweep's once per server, each labelled in requests."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a terminal: the tqdm bar (a log gets lines)
    firsttoken_endpoints([servers.spec("ref"), servers.spec("kernel")], _band(servers), prompts="natural50", limit=2)
    err = capsys.readouterr().err
    drawn = _drawn(err, "firsttoken requests (prompt x server)")
    assert {t for _, t in drawn} == {2 * 6} and [d for d, _ in drawn] == list(range(13)), err
    assert "request/s" in err
    sweep_endpoints([servers.spec("ref"), servers.spec("kernel")], _band(servers),
                    tokenizer=CheckOptions(model="ref-cpu"), tokens=(32, 32))
    drawn = _drawn(capsys.readouterr().err, "sweep requests (one a server)")
    assert {t for _, t in drawn} == {6} and [d for d, _ in drawn] == list(range(7)), drawn


def test_a_band_of_reruns_cannot_judge(servers):
    """The reference reruns bit for bit and its second instance too: a band of zero width, never judged against."""
    report = firsttoken_endpoints([servers.spec("ref"), servers.spec("kernel")], [servers.spec("ref2")],
                                  prompts="natural50", limit=2, quiet=True)
    assert report.verdict == "INCONCLUSIVE"
    assert "bit for bit" in report.facts["rerun"]
    kernel = next(r for r in report.extra["summary_rows"] if r["backend"] == "kernel")
    assert kernel["verdict"] == "INCONCLUSIVE" and "--band-endpoint" in kernel["note"]


def _cli(args: list[str], capsys) -> tuple[int, str]:
    code = cli.main(args)
    return code, capsys.readouterr().err


def test_a_band_of_reference_instances_is_of_zero_width_and_cannot_judge(servers, tmp_path, capsys):
    """Three band servers that all rerun the reference bit for bit: a band of zero width, so an ideal kernel is
    INCONCLUSIVE (exit 3) as in the sweep, never FAILed against 0."""
    code, err = _cli(["firsttoken", "--limit", "3", "--quiet", "--out", str(tmp_path / "z"), "--endpoint",
                      servers.spec("ref"), "--endpoint", servers.spec("b0", "legit"),
                      *_band_args([servers.spec("ref", f"r{i}") for i in (1, 2, 3)])], capsys)
    assert code == 3, err
    row = next(r for r in json.loads((tmp_path / "z" / "summary.json").read_text())["summary_rows"]
               if r["backend"] == "legit")
    assert row["verdict"] == "INCONCLUSIVE" and "zero width" in row["note"] and row["mean_dlogprob"] > 0, row


def test_wrong_port_is_one_line_and_nothing_written(servers, tmp_path, capsys):
    free = httpx.URL(servers.urls["ref"]).copy_with(port=1)
    code, err = _cli(["firsttoken", "--endpoint", servers.spec("ref"), "--endpoint", f"x={free}", "--retries", "0",
                      "--limit", "1", "--quiet", "--out", str(tmp_path / "w")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "unreachable" in err, err
    assert not (tmp_path / "w").exists()


@pytest.fixture(scope="module")
def nan_server():
    """A server whose kernel emits NaN from its first call: it answers HTTP 500 "non-finite logits"."""
    nan = Servers()
    try:
        nan.start({"faulty": FAULTY}, env={"GLMCHECK_TEST_FAULT": "nan@1"})
        yield nan
    finally:
        nan.stop_all()


def test_a_candidate_server_with_nan_logits_fails_and_the_record_is_written(servers, nan_server, tmp_path, capsys):
    band = _band_args(_band(servers))
    code, err = _cli(["firsttoken", "--endpoint", servers.spec("ref"), "--endpoint", servers.spec("kernel"),
                      "--endpoint", nan_server.spec("faulty"), *band, "--limit", "2", "--quiet",
                      "--out", str(tmp_path / "n")], capsys)
    assert code == 1, err
    rows = {r["backend"]: r for r in json.loads((tmp_path / "n" / "summary.json").read_text())["summary_rows"]}
    assert rows["faulty"]["verdict"] == "FAIL" and "non-finite logits" in rows["faulty"]["note"], rows["faulty"]
    assert rows["kernel"]["verdict"] == "PASS", rows["kernel"]
    report = sweep_endpoints([servers.spec("ref"), nan_server.spec("faulty")], _band(servers),
                             tokenizer=CheckOptions(model="ref-cpu"), tokens=(32, 64), quiet=True)
    assert report.verdict == "FAIL" and report.extra["onsets"]["faulty"]["onset"] == 32
    assert all("non-finite" in r["note"] for r in report.rows if r["backend"] == "faulty")


def test_a_reference_or_band_server_with_nan_logits_is_bad_input(servers, nan_server, tmp_path, capsys):
    for args in (["--endpoint", nan_server.spec("faulty"), "--endpoint", servers.spec("kernel")],
                 ["--endpoint", servers.spec("ref"), "--endpoint", servers.spec("kernel"), "--band-endpoint",
                  nan_server.spec("faulty")]):
        code, err = _cli(["firsttoken", *args, *_band_args(_band(servers)),
                          "--limit", "1", "--quiet", "--out", str(tmp_path / "b")], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "non-finite" in err and "bad input" in err, err
        assert not (tmp_path / "b" / "summary.json").exists()


def test_a_server_killed_mid_run_then_resumed(servers, tmp_path, capsys):
    """The candidate dies in the 3rd prompt's forward (3 kernel calls a forward): exit 2, the two finished
    prompts kept, no record; against a restarted server the rerun asks the servers for the other two only."""
    out = tmp_path / "k"
    dying = Servers()
    args = ["firsttoken", "--prompts", "natural50", "--limit", "4", "--quiet", "--retries", "1", "--out", str(out),
            "--endpoint", servers.spec("ref"), *_band_args(_band(servers))]
    try:
        dying.start({"faulty": FAULTY}, env={"GLMCHECK_TEST_FAULT": "die@7"})
        code, err = _cli([*args, "--endpoint", dying.spec("faulty")], capsys)
    finally:
        dying.stop_all()
    assert code == 2 and len(err.strip().splitlines()) == 1 and "endpoint faulty" in err, err
    assert len(_items(out)) == 2 and not (out / "summary.json").exists()
    before = _forwards(servers, "ref")
    restarted = Servers()
    try:
        restarted.start({"faulty": FAULTY})
        code, err = _cli([*args, "--endpoint", restarted.spec("faulty")], capsys)
    finally:
        restarted.stop_all()
    assert code in (0, 3) and "2 of 4 prompts finished there earlier are kept" in err, err
    assert _forwards(servers, "ref") - before == 2 * 2, "the reference asked again (and rerun) for 2 prompts only"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["facts"]["resumed_items"] == 2 and len({r["prompt_id"] for r in summary["rows"]}) == 4


def test_a_resumed_run_shows_the_tokens_an_uninterrupted_one_shows(servers, tmp_path, capsys):
    """Two prompts' items of a finished run removed, as an interrupted run leaves it: the resumed record equals the
    uninterrupted one, the disagreement tokens included (they were kept as this process's token numbers)."""
    out = tmp_path / "t"
    args = ["firsttoken", "--prompts", "natural50", "--limit", "3", "--quiet", "--out", str(out),
            "--endpoint", servers.spec("ref"), "--endpoint", servers.spec("fault"),
            *_band_args(_band(servers))]
    _cli(args, capsys)
    whole = json.loads((out / "summary.json").read_text())
    assert whole["disagreements"], "the fault flips some first tokens"
    (out / "summary.json").unlink()
    for item in sorted(_items(out))[:2]:
        item.unlink()
    _cli(args, capsys)
    resumed = json.loads((out / "summary.json").read_text())
    assert resumed["facts"]["resumed_items"] == 1
    assert resumed["disagreements"] == whole["disagreements"] and resumed["summary_rows"] == whole["summary_rows"]


def test_sigint_mid_run_then_a_rerun_resumes(servers, tmp_path, capsys):
    out = tmp_path / "s"
    args = ["firsttoken", "--prompts", "natural50", "--limit", "5", "--quiet", "--out", str(out),
            "--endpoint", servers.spec("ref"), "--endpoint", servers.spec("kernel"),
            *_band_args(_band(servers))]
    process = subprocess.Popen([sys.executable, "-m", "glmcheck", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=default_sigint)  # noqa: PLW1509  (restores SIGINT; no threads yet)
    deadline = time.monotonic() + 240
    while not _items(out) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    done = len(_items(out))
    assert 1 <= done < 5 and not (out / "summary.json").exists()
    before = _forwards(servers, "ref")
    code, err = _cli(args, capsys)
    assert code in (0, 3) and f"{done} of 5 prompts finished there earlier are kept" in err, err
    assert _forwards(servers, "ref") - before == 2 * (5 - done)


def test_sweep_through_servers_finds_the_onset(servers, tmp_path):
    """The fault firing from token 100 on, served: out from 128 tokens, as in process; one request per server covers
    every length (the servers list the top-k of every position of the longest prompt)."""
    remote = sweep_endpoints([servers.spec("ref"), servers.spec("late")], _band(servers),
                             tokenizer=CheckOptions(model="ref-cpu"), tokens=(32, 256), quiet=True,
                             record_dir=tmp_path / "w")
    local = sweep(CheckOptions(model="ref-cpu", backends=[LATE], band=3, quiet=True), tokens=(32, 256))
    assert remote.extra["onsets"]["late"]["onset"] == local.extra["onsets"]["late"]["onset"] == 128
    assert remote.extra["onsets"]["late"]["stays_out"] and remote.verdict == local.verdict == "FAIL"
    assert remote.facts["requests"] == 2 + 3 + 1 and remote.facts["measure"] == "topk_dlogprob"


def test_logits_through_servers_judges_every_position_of_one_prompt(servers, tmp_path, capsys):
    """`glmcheck logits --endpoint`: every position of one prompt, beside the band servers (the sweep's one-bin
    form): the fault firing from token 100 on FAILs at 256 tokens, the kernel PASSes, as in process."""
    out = tmp_path / "l"
    args = ["logits", "--model", "ref-cpu", "--tokens", "256", "--quiet", "--out", str(out),
            "--endpoint", servers.spec("ref"), "--endpoint", servers.spec("kernel"), "--endpoint", servers.spec("late")]
    for spec in _band(servers):
        args += ["--band-endpoint", spec]
    code, err = _cli(args, capsys)
    assert code == 1, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["facts"]["lengths"] == [256] and summary["facts"]["measure"] == "topk_dlogprob"
    verdicts = {row["backend"]: row["verdict"] for row in summary["rows"] if row.get("verdict") in ("PASS", "FAIL")}
    assert verdicts == {"kernel": "PASS", "late": "FAIL"}, verdicts
    local = logits(CheckOptions(model="ref-cpu", backends=["triton_sparse_mla", LATE], band=3, quiet=True),
                   tokens=[256])
    local_verdicts = {row["backend"]: row["verdict"] for row in local.rows if row.get("verdict") in ("PASS", "FAIL")}
    assert local_verdicts == {"triton_sparse_mla": "PASS", "late": "FAIL"}, local_verdicts
    code, err = _cli(["logits", "--model", "ref-cpu", "--tokens", "128,256", "--endpoint", servers.spec("ref")],
                     capsys)
    assert code == 2 and "name one length" in err and "Traceback" not in err
