"""This process's one precompile child (`glmcheck.startup.precompile`): started once, waited for by compile ahead
(`glmcheck.startup.compile_ahead`) before it compiles what the child may have cached, stopped at exit."""

from __future__ import annotations

import atexit
import subprocess

WAIT_SECONDS = 120.0  # the longest wait for the child; past it the child is stopped
_child: subprocess.Popen | None = None


def start(argv: list[str]) -> bool:
    """Start the child `argv`, its input and output discarded; False when one is running already or it cannot
    start."""
    global _child
    if _child is not None:
        return False
    try:
        _child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return False
    atexit.register(stop)
    return True


def wait(timeout: float = WAIT_SECONDS) -> int | None:
    """Wait for a running child (at most `timeout` s, then stop it); its exit code, or None when there was none or
    it was stopped."""
    global _child
    if _child is None:
        return None
    try:
        return _child.wait(timeout)
    except subprocess.TimeoutExpired:
        stop()
        return None
    finally:
        _child = None


def stop() -> None:
    """Stop a running child (at exit, or past the wait); Triton writes its cache entries whole, so none is left
    half-written."""
    global _child
    if _child is not None and _child.poll() is None:
        _child.kill()
        _child.wait()
    _child = None
