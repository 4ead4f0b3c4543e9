"""Child processes that take Ctrl-C whatever the test run inherited.

A command started in the background by a non-interactive shell (`cmd &`, `nohup ... &`) inherits SIGINT ignored,
and Python then installs no KeyboardInterrupt handler in its children: a test that sends SIGINT to a glmcheck run
would see it finish (exit 0) instead of being interrupted. Passed as `preexec_fn`, this restores the default
disposition in the child before it starts, so Python installs its handler as in a terminal."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


def default_sigint() -> None:
    """preexec_fn for subprocess.Popen: SIGINT back to its default in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def python_sigint_handler() -> Iterator[None]:
    """Within: Python's own SIGINT handler (KeyboardInterrupt), as in a terminal, for a test that interrupts its
    own process; the disposition the test run inherited (ignored, under `nohup ... &`) is restored after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
