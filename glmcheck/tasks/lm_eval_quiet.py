"""lm-eval kept quiet and quick while `glmcheck.tasks.harness.run_tasks` runs it.

- `lm_eval_logging`: lm-eval's WARNING+ messages captured (it logs the server's error body there); while
  `quiet`, its logging and every progress bar silenced (stderr is redirected for the call: not thread-safe), else
  its progress bars and warnings shown, its INFO lines only with LMEVAL_LOG_LEVEL=INFO.
- `light_env_info`: two deviations from a plain simple_evaluate: the results' `pretty_env_info` is not
  collected (torch's collect_env takes 5-10 s a call; `asked["server"]` says what served the run), and the
  working directory's git hash is asked for with git's stderr discarded (`quiet_git_hash`: lm-eval's own call lets
  git print "fatal: not a git repository" to the terminal from any directory outside a repository, --quiet or not).
- `lm_eval_failure`: what lm-eval raised, as one line with the server's own error message when it gave one
  (`NonFiniteServer` when that message says its logits were NaN/Inf).
- `quiet_abandoned_requests`: asyncio's "Task exception was never retrieved" tracebacks of the concurrent requests
  a failed one left behind are dropped (the first failure is the one reported).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
from pathlib import Path

from glmcheck.process.git import git_output
from glmcheck.sources.transport import one_line, says_non_finite


class _Captured(logging.Handler):
    """Keeps lm-eval's WARNING+ messages of a run (the server's error body is logged there)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a message that cannot be formatted is not worth failing over
            self.messages.append(record.getMessage())


# lm-eval warns of batches on every run with --batch-size > 1; glmcheck asks for them (`--batch-size`, default 8) and
# the servers it talks to (glmcheck serve, vLLM, SGLang) take a batch of prompts of any lengths.
BATCH_WARNING = "Batch size > 1 detected"


def _not_the_batch_warning(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(BATCH_WARNING)


class _AbandonedRequests(logging.Filter):
    """Drops asyncio's "Task exception was never retrieved" for an aiohttp request: when one of lm-eval's concurrent
    requests fails (a server died), the gather it waits in raises the first error and the others' failures are left
    in tasks nobody reads, each logged with its traceback when collected. The first error is what glmcheck reports."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (str(record.msg).startswith("Task exception was never retrieved") and error is not None
                    and type(error).__module__.split(".")[0] in ("aiohttp", "asyncio"))


_ABANDONED = _AbandonedRequests()


def quiet_abandoned_requests() -> None:
    """Install `_AbandonedRequests` on asyncio's logger (once; it stays, since the tasks may be collected later)."""
    logger = logging.getLogger("asyncio")
    if _ABANDONED not in logger.filters:
        logger.addFilter(_ABANDONED)


@contextlib.contextmanager
def lm_eval_logging(quiet: bool):
    """lm-eval's logger for the call: WARNING+ captured; quiet: nothing printed (lm-eval's messages and
    every progress bar, which write to stderr), else its progress bars and WARNING+ messages on stderr (its INFO
    lines with LMEVAL_LOG_LEVEL=INFO, lm-eval's own switch)."""
    quiet_abandoned_requests()
    logger = logging.getLogger("lm_eval")
    saved = (logger.level, logger.propagate, list(logger.handlers))
    captured = _Captured()
    if not quiet:
        from lm_eval.utils import setup_logging

        setup_logging(logging.WARNING)
        shown = list(logger.handlers)
        for handler in shown:
            handler.addFilter(_not_the_batch_warning)
        logger.addHandler(captured)
        try:
            yield captured
        finally:
            logger.removeHandler(captured)
            for handler in shown:
                handler.removeFilter(_not_the_batch_warning)
        return
    for name in ("transformers", "datasets"):  # their handlers bind stderr when first set up: before the redirect
        with contextlib.suppress(Exception):
            __import__(f"{name}.utils.logging", fromlist=["get_logger"]).get_logger(name)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    logger.handlers = [captured]
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield captured
    finally:
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        logger.handlers = saved[2]


ENV_NOT_COLLECTED = "not collected by glmcheck (torch's collect_env takes seconds); see asked.server for the server"


def quiet_git_hash() -> str | None:
    """`git describe --always` in the working directory, or None outside a repository or without git; git's
    messages are discarded."""
    return git_output("describe", "--always", cwd=Path.cwd()) or None


@contextlib.contextmanager
def light_env_info(lm_eval):
    """simple_evaluate without torch's collect_env (`add_env_info`: 5-10 s a call, for a text that says
    nothing about a server): the same keys, with lm-eval's and transformers' versions; its git hash asked for
    quietly (`quiet_git_hash`). Both restored after."""
    evaluator = lm_eval.evaluator
    original = getattr(evaluator, "add_env_info", None)
    if original is None:  # another lm-eval layout: leave it as it is
        yield
        return
    original_git_hash = getattr(evaluator, "get_git_commit_hash", None)

    def light(storage: dict) -> None:
        try:
            import transformers

            transformers_version = transformers.__version__
        except ImportError:
            transformers_version = "N/A"
        storage.update({"pretty_env_info": ENV_NOT_COLLECTED, "transformers_version": transformers_version,
                        "lm_eval_version": lm_eval.__version__, "upper_git_hash": None})

    evaluator.add_env_info = light
    if original_git_hash is not None:
        evaluator.get_git_commit_hash = quiet_git_hash
    try:
        yield
    finally:
        evaluator.add_env_info = original
        if original_git_hash is not None:
            evaluator.get_git_commit_hash = original_git_hash


class NonFiniteServer(ValueError):
    """lm-eval failed because the server answered that its logits were NaN/Inf: about the kernel it serves (a
    candidate's FAIL), not a broken server."""


def lm_eval_failure(err: BaseException, captured: _Captured, where: str) -> ValueError:
    """One line: what lm-eval raised, with the server's own message when it logged one (NonFiniteServer when that
    message says the logits were NaN/Inf)."""
    text = f"{type(err).__name__}: {one_line(err, 200) or 'no message'}"
    said = [m for m in captured.messages if "Response text" in m or "error message" in m]
    if said:
        message = _server_said(said[-1])
        text += f"; the server said: {message}"
        if says_non_finite(message):
            return NonFiniteServer(f"{where}: server answered non-finite logits: {message}")
    return ValueError(f"{where}: lm-eval failed: {text}")


def _server_said(message: str) -> str:
    """The server's error message in lm-eval's warning about a failed request (its OpenAI-style error
    body's `error.message` when the body is one), on one line."""
    for marker in ("Response text: ", "error message: "):
        if marker in message:
            body = message.split(marker, 1)[1].removesuffix(". Retrying...")
            try:
                error = json.loads(body).get("error")
                if isinstance(error, dict) and isinstance(error.get("message"), str):
                    return one_line(error["message"], 200)
            except (ValueError, AttributeError):
                pass
            return one_line(body, 200)
    return one_line(message, 200)
