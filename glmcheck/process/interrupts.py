"""Interrupts that come from outside the process, told apart from exceptions that code raises.

A kernel under test is somebody else's code: whatever it raises, `SystemExit(0)` and `KeyboardInterrupt` included,
is its FAIL (`glmcheck.model.swap`), not the end of the check. A Ctrl-C (SIGINT) or a `kill` (SIGTERM) delivered to
the process while that kernel runs must still stop the run. Python raises a plain `KeyboardInterrupt` for both a
SIGINT and a `raise KeyboardInterrupt`, so glmcheck's own handlers raise `SignalInterrupt` (SIGINT) and `Terminated`
(SIGTERM), both subclasses of `KeyboardInterrupt` (everything that stops on Ctrl-C stops on them); a
`KeyboardInterrupt` that is neither, raised while `signals_told_apart` holds, was raised by code.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class SignalInterrupt(KeyboardInterrupt):
    """SIGINT delivered to the process (Ctrl-C): the run stops, finished items kept (exit 130)."""


class Terminated(SignalInterrupt):
    """SIGTERM delivered to the process: handled like Ctrl-C, but the CLI exits 143."""


def raise_sigint(signum, frame):
    """A SIGINT handler: raise `SignalInterrupt` (the CLI installs it for the whole run)."""
    raise SignalInterrupt


def raise_terminated(signum, frame):
    """A SIGTERM handler: raise `Terminated` (the CLI installs it for the whole run)."""
    raise Terminated


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def signals_told_apart() -> Iterator[bool]:
    """Within: a SIGINT raises `SignalInterrupt`. Yields whether a signal can be told from a `KeyboardInterrupt`
    that code raised: True where Python's default SIGINT handler (or this one) is in place in the main thread, False
    elsewhere (another thread, or a handler of the caller's own, which is left alone). Where SIGINT is ignored or
    kills the process outright, no KeyboardInterrupt can be a signal's: True."""
    if not _main_thread():
        yield False
        return
    current = signal.getsignal(signal.SIGINT)
    if current is raise_sigint or current in (signal.SIG_IGN, signal.SIG_DFL):  # no SIGINT becomes an exception
        yield True
        return
    if current is not signal.default_int_handler:
        yield False
        return
    signal.signal(signal.SIGINT, raise_sigint)
    try:
        yield True
    finally:
        signal.signal(signal.SIGINT, current)


def raised_by_code(err: BaseException, told_apart: bool) -> bool:
    """Whether `err`, raised out of a call, is that code's own doing (True) or an interrupt of the process to pass on
    (False): a `SignalInterrupt` is the process's; a plain `KeyboardInterrupt` is the code's only where signals were
    `told_apart`; every other exception and BaseException (`SystemExit`, `GeneratorExit`, ...) is the code's."""
    if isinstance(err, SignalInterrupt):
        return False
    if isinstance(err, KeyboardInterrupt):
        return told_apart
    return True
