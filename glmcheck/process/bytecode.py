"""Compiled bytecode for installs Python cannot write it into.

Python caches each module's compiled bytecode in a `__pycache__` beside its source. Where that folder cannot be
written and holds nothing (a read-only image, a package installed with `pip --no-compile` by another user), every
process compiles torch's and transformers' sources again: on the project's H200 image about 1,800 modules, 6 s of
each run (docs/performance.md, "Time to verdict"). `use_private_cache()` then points `sys.pycache_prefix` (PEP 3147's
`PYTHONPYCACHEPREFIX`, Python 3.8+) at a folder of the user's cache, so the first run writes there and later runs read
there. It does nothing when the user chose (PYTHONPYCACHEPREFIX, PYTHONDONTWRITEBYTECODE) or when torch's bytecode is
already cached or can be; it must run before torch is imported to help.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

PROBE = "torch"  # the largest package a glmcheck run imports; where it is cached, the rest is too


def private_cache_dir() -> Path:
    """$XDG_CACHE_HOME/glmcheck/pycache (default ~/.cache/glmcheck/pycache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "glmcheck" / "pycache"


def needs_private_cache(package_dir: Path) -> bool:
    """True when the `__pycache__` of `package_dir` holds no bytecode and cannot be created or written."""
    cache = package_dir / "__pycache__"
    if cache.is_dir() and any(cache.glob("__init__.*.pyc")):
        return False
    return not os.access(cache if cache.is_dir() else package_dir, os.W_OK)


def use_private_cache() -> Path | None:
    """Set `sys.pycache_prefix` to `private_cache_dir()` when the installed torch's bytecode is neither cached
    nor cacheable and the user set no bytecode option; returns the folder, or None when nothing was changed."""
    if sys.pycache_prefix is not None or sys.dont_write_bytecode or "torch" in sys.modules:
        return None
    spec = importlib.util.find_spec(PROBE)
    if spec is None or not spec.submodule_search_locations:
        return None
    if not needs_private_cache(Path(next(iter(spec.submodule_search_locations)))):
        return None
    folder = private_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(folder, os.W_OK):
        return None
    sys.pycache_prefix = str(folder)
    return folder
