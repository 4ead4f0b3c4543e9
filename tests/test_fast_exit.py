"""A finished command ends without the interpreter's teardown (`glmcheck.process.fast_exit`, issue 55): its exit
code, its whole output and every exit handler kept; an uncaught exception exits as Python does."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import atexit, sys
    from glmcheck.process import fast_exit
    fast_exit.arm()

    class Loud:
        def __del__(self):  # runs in the interpreter's teardown, which a fast exit skips
            sys.stderr.write("teardown\\n")

    LOUD = Loud()
    atexit.register(lambda: open(sys.argv[1], "w").write("handler ran"))  # registered after arm: runs before it
    for line in range(20000):
        print(line)  # the last lines wait in the stream's buffer: flushed at the exit
    if sys.argv[2] == "raise":
        raise RuntimeError("boom")
    raise SystemExit(fast_exit.finish(int(sys.argv[2])))
""")


def _run(tmp_path, how: str, **env: str) -> subprocess.CompletedProcess:
    script = tmp_path / "cmd.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, str(script), str(tmp_path / "handler.txt"), how], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=60, check=False)


@pytest.mark.parametrize("code", [0, 3])
def test_a_finished_command_keeps_its_code_output_and_handlers_and_skips_the_teardown(tmp_path, code):
    done = _run(tmp_path, str(code))
    assert done.returncode == code
    assert done.stdout.split() == [str(n) for n in range(20000)]
    assert (tmp_path / "handler.txt").read_text() == "handler ran"
    assert "teardown" not in done.stderr


def test_the_teardown_runs_when_turned_off(tmp_path):
    done = _run(tmp_path, "0", GLMCHECK_FAST_EXIT="0")
    assert done.returncode == 0 and done.stdout.split()[-1] == "19999"
    assert "teardown" in done.stderr  # the same script: what the fast exit skips is really skipped there


def test_an_uncaught_exception_exits_as_python_does(tmp_path):
    done = _run(tmp_path, "raise")
    assert done.returncode == 1
    assert "RuntimeError: boom" in done.stderr and "teardown" in done.stderr
    assert (tmp_path / "handler.txt").read_text() == "handler ran"


def test_the_command_line_ends_with_its_code(tmp_path):
    """`python -m glmcheck` through `console_main`: a usage error's one line and exit 2, a report's output whole."""
    bad = subprocess.run([sys.executable, "-m", "glmcheck", "report", str(tmp_path / "missing")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    good = subprocess.run([sys.executable, "-m", "glmcheck", "--help"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert good.returncode == 0 and "layer0" in good.stdout
