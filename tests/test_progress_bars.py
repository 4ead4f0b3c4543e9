"""Per-forward progress (issue 58, item 4): every long check's bar on stderr advances once a forward, up to the
run's count of forwards (a broken plug-in's skipped continuation counted), and --quiet shows none."""

from __future__ import annotations

import re
import sys

import pytest

from glmcheck import cli
from tests.support.signals import python_sigint_handler

RAISES = "raises=tests/support/broken_kernels.py:raises"


def steps(err: str, desc: str) -> list[tuple[int, int]]:
    """The (done, total) counts the bar `desc` drew, in order."""
    return [(int(a), int(b)) for a, b in re.findall(rf"{desc}:[^\r\n]*?\| (\d+)/(\d+) ", err)]


@pytest.mark.parametrize("args, desc, total", [
    (["logits", "--tokens", "24,32", "--backends", "band:5"], "logits forwards", 2 * (2 + 4 + 1)),
    # per prompt: reference twice, 4 band variants, 2 backends, and a continuation step for the reference and each
    (["firsttoken", "--prompts", "natural50", "--limit", "2", "--continue", "1", "--backends", f"band:5,{RAISES}"],
     "firsttoken forwards", 2 * (2 + 4 + 2 + 1 * 3)),
    (["layer0", "--tokens", "24", "--backends", "band:5"], "layer0 forwards", 3 + 4 + 1),
    (["drift", "--tokens", "24", "--backends", "band:5"], "drift forwards", 2 + 4 + 1),
], ids=lambda x: x[0] if isinstance(x, list) else None)
def test_the_bar_advances_once_a_forward(args, desc, total, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a terminal: the tqdm bar
    code = cli.main(args + ["--model", "tiny", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code in (0, 1), err
    drawn = steps(err, desc)
    assert drawn and {t for _, t in drawn} == {total}, err
    assert [d for d, _ in drawn] == list(range(total + 1)), "every forward drawn, from 0 to the last"


STOPS = """
import os
import signal
from glmcheck.backends.band_kernels import band_variant

def stops(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    if q.shape[0] == 32 and os.environ.get("GLMCHECK_TEST_STOP"):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C during the second length (a plug-in's own raise is its FAIL)
    return band_variant(5)(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
"""


def test_a_resumed_run_starts_at_its_finished_forwards(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    (tmp_path / "stopping.py").write_text(STOPS)
    args = ["logits", "--model", "tiny", "--tokens", "24,32", "--backends", f"stops={tmp_path / 'stopping.py'}:stops",
            "--out", str(tmp_path / "r")]
    monkeypatch.setenv("GLMCHECK_TEST_STOP", "1")
    with python_sigint_handler():  # the plug-in's SIGINT is a Ctrl-C also where the test run inherited it ignored
        assert cli.main(args) == 130
    capsys.readouterr()
    monkeypatch.delenv("GLMCHECK_TEST_STOP")
    assert cli.main(args) == 0
    drawn = steps(capsys.readouterr().err, "logits forwards")
    assert drawn[0] == (7, 14) and [d for d, _ in drawn] == list(range(7, 15)), drawn


def test_quiet_shows_no_bar(tmp_path, capsys):
    code = cli.main(["logits", "--model", "tiny", "--tokens", "24", "--backends", "band:5", "--quiet",
                     "--out", str(tmp_path / "r")])
    captured = capsys.readouterr()
    assert code == 0 and "forwards" not in captured.err and "forward/s" not in captured.err, captured.err


def test_a_redirected_stderr_gets_a_line_per_tenth_not_a_bar(tmp_path, capsys):
    """issue 73: no carriage-return bars in a log file; a line at every ~10 % of the forwards with an ETA."""
    assert cli.main(["layer0", "--model", "tiny", "--tokens", "24", "--backends", "band:5", "--out",
                     str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err
    lines = re.findall(r"^layer0 forwards: (\d+)/8 forwards \(\d+%\), \d+ s elapsed(, ETA \d+ s)?$", err, re.MULTILINE)
    assert [int(n) for n, _ in lines] == list(range(1, 9)) and lines[0][1] and not lines[-1][1], err


def test_quiet_in_the_library_prints_nothing(capsys):
    """issue 73: quiet=True silences what --quiet silences: the bar and the warnings (the interpreter's too)."""
    from glmcheck.evaluate import CheckOptions, layer0

    report = layer0(CheckOptions(model="tiny", backends=["triton_sparse_mla"], quiet=True), tokens=16)
    assert capsys.readouterr().err == "" and any("interpreter" in w for w in report.warnings)
