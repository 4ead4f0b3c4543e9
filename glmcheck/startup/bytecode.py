"""Compiled bytecode for installs Python cannot write it into.

Python caches each module's compiled bytecode in a `__pycache__` beside its source. Where that folder cannot be
written and holds nothing (a read-only image, a package installed with `pip --no-compile` by another user), every
process compiles torch's and transformers' sources again: on the project's H200 image about 1,800 modules, 6 s of
each run (docs/performance.md, "Time to verdict"). `use_private_cache()` then points `sys.pycache_prefix` (PEP 3147's
`PYTHONPYCACHEPREFIX`, Python 3.8+) at a folder of the user's cache, so the first run writes there and later runs read
there. It does nothing when the user chose (PYTHONPYCACHEPREFIX, PYTHONDONTWRITEBYTECODE) or when torch's bytecode is
already cached or can be; it must run before torch is imported to help.

PYTHONDONTWRITEBYTECODE=1 (set by many container images, the project's H200 image among them) is the user's choice
and stands: every run compiles its imports from source. `GLMCHECK_PYCACHE=1` is the user's opt-in for glmcheck
alone: bytecode is then written, but only to the private folder (never beside the installed sources, which that
setting usually protects), and read from there by later runs. `--profile` names the cost and the opt-in
(`hint()`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

PROBE = "torch"  # the largest package a glmcheck run imports; where it is cached, the rest is too
OPT_IN = "GLMCHECK_PYCACHE"


def private_cache_dir() -> Path:
    """$XDG_CACHE_HOME/glmcheck/pycache (default ~/.cache/glmcheck/pycache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "glmcheck" / "pycache"


def needs_private_cache(package_dir: Path) -> bool:
    """True when the `__pycache__` of `package_dir` holds no bytecode and cannot be created or written."""
    if _has_bytecode(package_dir):
        return False
    cache = package_dir / "__pycache__"
    return not os.access(cache if cache.is_dir() else package_dir, os.W_OK)


def opted_in() -> bool:
    """True when GLMCHECK_PYCACHE asks for the private cache even where Python is told to write no bytecode."""
    return os.environ.get(OPT_IN, "").strip().lower() in ("1", "true", "yes")


def _probe_dir() -> Path | None:
    spec = importlib.util.find_spec(PROBE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _has_bytecode(package_dir: Path) -> bool:
    cache = package_dir / "__pycache__"
    return cache.is_dir() and any(cache.glob("__init__.*.pyc"))


def use_private_cache() -> Path | None:
    """Set `sys.pycache_prefix` to `private_cache_dir()` when the installed torch's bytecode is neither cached
    nor cacheable and the user set no bytecode option, or when GLMCHECK_PYCACHE=1 opts in and torch has no bytecode
    beside its sources (then bytecode is written there even under PYTHONDONTWRITEBYTECODE). Returns the folder, or
    None when nothing was changed."""
    if sys.pycache_prefix is not None or PROBE in sys.modules:
        return None
    opt_in = opted_in()
    if sys.dont_write_bytecode and not opt_in:
        return None
    package_dir = _probe_dir()
    if package_dir is None:
        return None
    if _has_bytecode(package_dir) if opt_in else not needs_private_cache(package_dir):
        return None
    folder = private_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(folder, os.W_OK):
        return None
    sys.pycache_prefix = str(folder)
    sys.dont_write_bytecode = False
    return folder


def hint() -> str | None:
    """A line for `--profile` when this run's imports compiled torch from source because Python may write no
    bytecode here (PYTHONDONTWRITEBYTECODE) and none is cached; None otherwise."""
    if not sys.dont_write_bytecode or sys.pycache_prefix is not None:
        return None
    torch = sys.modules.get(PROBE)
    package_dir = Path(torch.__file__).parent if getattr(torch, "__file__", None) else _probe_dir()
    if package_dir is None or _has_bytecode(package_dir):
        return None
    return (f"imports: Python may write no bytecode here (PYTHONDONTWRITEBYTECODE) and torch has none, so every run "
            f"compiles its imports from source; {OPT_IN}=1 caches them under {private_cache_dir()} "
            f"(about 6 s a run on an H200 image)")
