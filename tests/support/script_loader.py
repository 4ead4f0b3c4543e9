"""Load a file of scripts/ as a module for a CPU test, as it is when it runs."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

import pytest

SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "scripts"


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as a module. While it executes, scripts/ is on sys.path (the scripts import
    each other, e.g. gluon_compile.py sass_loops.py) and the module is in sys.modules under `name`
    (their dataclasses look their module up there); both are undone afterwards."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(SCRIPTS))
        patch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
    return module
