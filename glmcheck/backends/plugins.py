"""Backends from outside glmcheck: installed packages' entry points, and `name=module:function`.

An installed package puts its kernel under test by declaring, in its pyproject.toml,

    [project.entry-points."glmcheck.backends"]
    mykernel = "mypackage.kernels:sparse_prefill"

where the function has the backend signature (`glmcheck.backends.registry`). Without installing
anything, `--backends mine=mypackage.kernels:sparse_prefill` (a module importable from the working
directory or the path) or `--backends mine=path/to/file.py:sparse_prefill` names one. Either way the
function is loaded once and registered under its name, with its source recorded.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

from glmcheck.backends.errors import BackendError
from glmcheck.process.interrupts import raised_by_code, signals_told_apart

ENTRY_POINT_GROUP = "glmcheck.backends"


def entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """The backends installed packages declare, by name."""
    return {point.name: point for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def entry_point_source(point: importlib.metadata.EntryPoint) -> str:
    """Where an entry point comes from, in words: `entry point of <distribution> (<module:function>)`."""
    dist = point.dist.name if point.dist is not None else "an installed package"
    return f"entry point of {dist} ({point.value})"


def load_entry_point(name: str, point: importlib.metadata.EntryPoint) -> Callable:
    """The function of an entry point; BackendError naming the backend and its module otherwise."""
    with signals_told_apart() as told_apart:
        try:
            fn = point.load()
        except BaseException as err:  # any failure to import is the plugin's, SystemExit too
            if not raised_by_code(err, told_apart):
                raise
            raise BackendError(f"backend {name!r}: cannot load {point.value} ({type(err).__name__}: "
                               f"{_first_line(err)})") from None
    return _callable(name, fn, point.value)


def parse_spec(spec: str) -> tuple[str, str]:
    """("name", "module:function") of a `name=module:function` spec; BackendError otherwise."""
    name, _, target = spec.partition("=")
    name, target = name.strip(), target.strip()
    module, _, attr = target.rpartition(":")
    if not name or not module or not attr or "," in spec:
        raise BackendError(f"backend {spec!r}: expected NAME=MODULE:FUNCTION or NAME=FILE.py:FUNCTION")
    return name, target


def load_target(name: str, target: str) -> Callable:
    """The function `module:function` (a dotted module importable from the working directory or
    sys.path, or a .py file) names; BackendError naming the backend and the module otherwise."""
    module_name, _, attr = target.rpartition(":")
    with signals_told_apart() as told_apart:
        try:
            module = _import_file(module_name) if module_name.endswith(".py") else _import_module(module_name)
        except BackendError:
            raise
        except BaseException as err:  # the plugin's own import error, SystemExit too, in one line
            if not raised_by_code(err, told_apart):
                raise
            raise BackendError(f"backend {name!r}: cannot import {module_name} ({type(err).__name__}: "
                               f"{_first_line(err)})") from None
    if not hasattr(module, attr):
        raise BackendError(f"backend {name!r}: module {module_name} has no {attr!r}")
    return _callable(name, getattr(module, attr), target)


def _import_module(module_name: str):
    """Import `module_name` with the working directory on the path, as `python -m` would."""
    try:
        cwd = str(Path.cwd())
    except FileNotFoundError:
        raise BackendError(f"cannot import {module_name}: the working directory no longer exists (removed while "
                           f"glmcheck ran?); run from an existing directory") from None
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    finally:
        if added:
            sys.path.remove(cwd)


def _import_file(path_text: str):
    path = Path(path_text)
    if not path.is_file():
        raise BackendError(f"backend file {path_text} does not exist")
    spec = importlib.util.spec_from_file_location(f"glmcheck_backend_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _callable(name: str, fn: object, target: str) -> Callable:
    if not callable(fn):
        raise BackendError(f"backend {name!r}: {target} is a {type(fn).__name__}, not a function")
    return fn


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "no message"
