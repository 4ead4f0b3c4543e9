"""End a finished command-line process without the interpreter's teardown.

After a command returns, CPython joins its threads, runs the `atexit` handlers, then tears down every module and
object (torch's, transformers', Triton's: tens of thousands). That last part changes nothing a run leaves behind
(records are written whole and flushed before the command returns) and costs about 1 s on the 2-core CPU
(docs/performance.md, "Exit without the teardown"). `arm()` registers, first of all handlers, a handler that
therefore runs last (atexit runs them in reverse order): every other handler has run (the precompile child stopped,
logging flushed, libraries' own), threads are joined, and it flushes the standard streams and ends the process with
`os._exit(code)`. Only a command that returned a code through `finish(code)` ends so; an uncaught exception, or a
library's caller of `glmcheck.cli.main`, gets Python's ordinary exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys

ENV = "GLMCHECK_FAST_EXIT"  # "0" keeps Python's own teardown (to debug a library's finaliser)

_armed = False
_code: int | None = None


def arm() -> None:
    """Register the exit handler; call it first thing in a process's entry point, before heavy imports (a handler
    registered before it would run after it, that is, never). Idempotent."""
    global _armed
    if _armed or os.environ.get(ENV, "1").strip() == "0":
        return
    atexit.register(_exit_now)
    _armed = True


def finish(code: int) -> int:
    """Record the exit code of a command that returned normally and return it (for `raise SystemExit(finish(...))`)."""
    global _code
    _code = int(code)
    return _code


def _exit_now() -> None:
    if _code is None:
        return
    import logging

    logging.shutdown()  # its own atexit handler may have been registered before ours: flush it here
    for stream in (sys.stdout, sys.stderr):
        # a closed pipe or stream: what it held goes nowhere, as at any exit
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(_code)
