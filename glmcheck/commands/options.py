"""Checks of command-line values and paths, run before any model is built or any file written.

Each raises ValueError naming the option and what it expected, which the CLI prints as one line
with exit 2.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed takes a 64-bit seed; argparse takes any int


def check_seed(seed: int, option: str = "--seed") -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"{option} must be an int in [0, 2**63 - 1], got {seed!r}")


def check_count(value: int | None, option: str, minimum: int = 1) -> None:
    """`value` (when given) is an int >= minimum."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{option} must be an int >= {minimum}, got {value!r}")


def check_number(value: float | None, option: str, *, positive: bool = False) -> None:
    """`value` (when given) is finite and >= 0 (> 0 when `positive`)."""
    if value is None:
        return
    bad = not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
        or value < 0 or (positive and value == 0)
    if bad:
        raise ValueError(f"{option} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")


def check_writable_dir(path: Path, option: str) -> None:
    """A file can be created in `path` (an existing directory): probed, not guessed from mode bits."""
    try:
        handle, probe = tempfile.mkstemp(dir=path, prefix=".glmcheck-probe-")
    except OSError as err:
        raise ValueError(f"{option}: cannot write in {path} ({err.strerror or type(err).__name__})") from None
    os.close(handle)
    os.unlink(probe)


def _existing_parent(path: Path) -> Path:
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{parent} is a file, not a directory")
    return parent


def check_out_dir(path: str | None, option: str = "--out") -> None:
    """`path` can hold a record: a directory (new, or a record to resume) whose place is writable;
    None checks the default, runs/ under the working directory."""
    target = Path(path) if path is not None else Path("runs")
    if target.exists() and not target.is_dir():
        raise ValueError(f"{option} {target} is a file; expected a record directory (new, or one to resume)")
    try:
        place = target if target.is_dir() else _existing_parent(target)
    except ValueError as err:
        raise ValueError(f"{option} {target}: {err}") from None
    check_writable_dir(place, f"{option} {target}")


def check_out_file(path: str, option: str = "--out", suffix: str | None = None) -> None:
    """`path` can be written as a file: not a directory, with the given suffix, in a writable place."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{option} {target} is a directory; expected a file path")
    if suffix and target.suffix != suffix:
        raise ValueError(f"{option} {target} must end in {suffix}")
    try:
        check_writable_dir(_existing_parent(target), f"{option} {target}")
    except ValueError as err:
        raise ValueError(str(err) if str(err).startswith(option) else f"{option} {target}: {err}") from None
