"""glmcheck: accuracy checks for the DSA sparse-MLA prefill kernel of GLM-5.x models.

Exit codes: 0 all checks pass, 1 a check failed, 2 bad usage or input (a one-line message).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from typing import Sequence

from glmcheck import __version__

COMMANDS = ("selfcheck", "selftest", "layer0", "logits", "firsttoken", "drift", "report", "capture_indices", "union_stats",
            "plan",
            "bench")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(prog="glmcheck", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"glmcheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"glmcheck.commands.{name}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    import glmcheck.kernels  # noqa: F401  (turns on Triton's interpreter on CPU-only machines)
    from glmcheck.backends.validation import BackendError
    from glmcheck.model.checkpoint import CheckpointError

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    ns = build_parser().parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _terminate) if _main_thread() else None
    try:
        with _torchrun(ns):
            return ns.handler(ns)
    except (ValueError, TypeError, FileNotFoundError, NotADirectoryError, BackendError, CheckpointError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"glmcheck {ns.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"glmcheck {ns.command}: interrupted; finished items are kept, rerun with the same --out to "
              f"resume", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _torchrun(ns: argparse.Namespace):
    """Under torchrun: join the process group (--tp must equal the world size), silence ranks > 0."""
    from glmcheck import distributed

    if not distributed.launched_by_torchrun():
        yield
        return
    if not hasattr(ns, "tp"):
        raise ValueError(f"{ns.command} does not run under torchrun (only the model commands with --tp do)")
    ctx = distributed.init_from_env(ns.tp, getattr(ns, "device", None))
    quiet = None if ctx.is_main else open(os.devnull, "w")
    try:
        with contextlib.redirect_stdout(quiet) if quiet else contextlib.nullcontext():
            yield
    finally:
        if quiet:
            quiet.close()
        distributed.shutdown()


def _terminate(signum, frame):
    """SIGTERM ends a run like Ctrl-C: finished items stay on disk for a resume."""
    raise KeyboardInterrupt


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
