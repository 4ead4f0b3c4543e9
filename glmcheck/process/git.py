"""What git says of a folder (by default the checkout glmcheck runs from), quietly: stdout, or None where git is
missing, fails or takes longer than GIT_TIMEOUT_S. Records name their code by it (`glmcheck.records.environment`);
lm-eval's runs are told the working directory's commit (`glmcheck.tasks.lm_eval_quiet`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import glmcheck

GIT_TIMEOUT_S = 5.0


def _checkout_dir() -> Path:
    """The directory holding the `glmcheck` package (the repository root for a source checkout)."""
    return Path(glmcheck.__file__).resolve().parent.parent


def git_output(*args: str, cwd: Path | None = None) -> str | None:
    """stdout of `git <args>` run in `cwd` (default: the checkout glmcheck lives in), stripped; None on any
    failure. git's messages are discarded."""
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=_checkout_dir() if cwd is None else cwd,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip()
