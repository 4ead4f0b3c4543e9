"""Killed runs resume from their finished items and end with the same record."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from glmcheck import cli
from glmcheck.checks import runner
from glmcheck.records.store import read_record
from tests.support.signals import default_sigint

FIRSTTOKEN = ["firsttoken", "--prompts", "natural50", "--limit", "4", "--backends", "triton_sparse_mla", "--quiet"]
LOGITS = ["logits", "--tokens", "24,32,40", "--backends", "triton_sparse_mla", "--quiet"]


def _items(out: Path) -> list[Path]:
    return [p for p in (out / "items").glob("*.json") if p.name != "fingerprint.json"] if out.exists() else []


def _kill_midway(args: list[str], out: Path, sig: int, after: int) -> int:
    proc = subprocess.Popen([sys.executable, "-m", "glmcheck", *args, "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)  # noqa: PLW1509  (restores SIGINT; no threads yet)
    deadline = time.monotonic() + 240
    while len(_items(out)) < after and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, "the run must not have finished before the signal"
    assert "rerun with the same --out to resume" in err or proc.returncode < 0
    if "rerun with the same --out to resume" in err:  # handled: 130 for SIGINT, 143 for SIGTERM
        assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[sig], proc.returncode
    return len(_items(out))


def _count_forwards(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = runner.forward_under

    def counting(model, ids, backend, *args, **kwargs):
        calls.append(backend)
        return real(model, ids, backend, *args, **kwargs)

    monkeypatch.setattr(runner, "forward_under", counting)
    for module in ("glmcheck.checks.firsttoken", "glmcheck.checks.logits"):
        monkeypatch.setattr(f"{module}.forward_under", counting)
    return calls


def _same_record(resumed: Path, whole: Path) -> None:
    a, b = read_record(resumed), read_record(whole)
    assert a.summary["verdict"] == b.summary["verdict"]
    pd.testing.assert_frame_equal(a.rows, b.rows)
    for key in ("summary_rows", "disagreements"):
        assert a.summary.get(key) == b.summary.get(key)


# per item: the exact reference twice, the band of 4, the backend
@pytest.mark.parametrize("args, per_item, sig", [(FIRSTTOKEN, 7, signal.SIGINT), (LOGITS, 7, signal.SIGTERM)],
                         ids=["firsttoken-SIGINT", "logits-SIGTERM"])
def test_killed_run_resumes_without_recomputing(tmp_path, monkeypatch, args, per_item, sig, capsys):
    out = tmp_path / "run"
    finished = _kill_midway(args, out, sig, after=2)
    total = 4 if args is FIRSTTOKEN else 3
    assert 2 <= finished < total
    assert not (out / "summary.json").exists(), "no final record from a killed run"
    calls = _count_forwards(monkeypatch)
    assert cli.main(args + ["--out", str(out)]) == 0
    assert len(calls) == (total - finished) * per_item, "finished items must not be recomputed"
    assert read_record(out).summary["facts"]["resumed_items"] == finished
    whole = tmp_path / "whole"
    assert cli.main(args + ["--out", str(whole)]) == 0
    _same_record(out, whole)


def test_resume_refuses_other_settings(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert cli.main(["logits", "--tokens", "24", "--backends", "band:5", "--quiet", "--out", str(out)]) == 0
    code = cli.main(["logits", "--tokens", "24", "--backends", "band:4", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "holds a run with other settings (" in err and "options.backends)" in err, err
    # the band's and the reference's forms (issue 72): recorded, a resume with another one refused in one line
    assert read_record(out).summary["options"]["band_impl"] == "torch", "auto on the CPU"
    same = ["logits", "--tokens", "24", "--backends", "band:5", "--quiet", "--out", str(out)]
    assert cli.main(same + ["--band-impl", "triton"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "other settings (options.band_impl)" in lines[0], lines
    monkeypatch.setenv("GLMCHECK_REFERENCE_IMPL", "triton")
    assert cli.main(same) == 2 and "other settings (options.reference_impl)" in capsys.readouterr().err
    monkeypatch.delenv("GLMCHECK_REFERENCE_IMPL")
    assert cli.main(same + ["--band-impl", "torch"]) == 0, "auto was torch here: the same form, resumed"
