"""The private bytecode cache (`glmcheck.startup.bytecode`, issue 55) is used only where an install can neither hold nor
take its bytecode, and never where the user chose."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from glmcheck.startup.bytecode import needs_private_cache


def test_a_package_with_bytecode_or_a_writable_folder_needs_none(tmp_path):
    package = tmp_path / "pkg"
    (package / "__pycache__").mkdir(parents=True)
    assert not needs_private_cache(package), "writable"
    (package / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"")
    os.chmod(package / "__pycache__", 0o555)
    try:
        assert not needs_private_cache(package), "already compiled"
    finally:
        os.chmod(package / "__pycache__", 0o755)


def test_a_read_only_folder_is_seen_as_such(tmp_path, monkeypatch):
    """As a non-root user would see it (root may write anywhere, so the permission answer is stood in for)."""
    package = tmp_path / "pkg"
    package.mkdir()
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert needs_private_cache(package)
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"")
    assert not needs_private_cache(package)


@pytest.mark.parametrize("env", [{"PYTHONDONTWRITEBYTECODE": "1"}, {"PYTHONPYCACHEPREFIX": "/tmp/theirs"}])
def test_the_users_choice_stands(env, tmp_path):
    code = ("import glmcheck.startup.bytecode as b, sys; b.needs_private_cache = lambda p: True; "
            "print(b.use_private_cache(), sys.pycache_prefix)")
    base = {k: v for k, v in os.environ.items() if k != "GLMCHECK_PYCACHE"}  # no opt-in: the user's choice stands
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         env={**base, **env, "XDG_CACHE_HOME": str(tmp_path)}).stdout.split()
    assert out[0] == "None" and out[1] == env.get("PYTHONPYCACHEPREFIX", "None"), out


def test_a_cache_is_made_when_needed(tmp_path):
    code = ("import glmcheck.startup.bytecode as b, sys; b.needs_private_cache = lambda p: True; "
            "print(b.use_private_cache(), sys.pycache_prefix)")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "GLMCHECK_PYCACHE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         env={**env, "XDG_CACHE_HOME": str(tmp_path)}).stdout.split()
    assert out == [str(tmp_path / "glmcheck" / "pycache")] * 2, out


def _in_fresh_python(code: str, tmp_path, **env: str) -> list[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX",
                                                             "GLMCHECK_PYCACHE")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                          env={**base, **env, "XDG_CACHE_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    return done.stdout.split("|")


@pytest.mark.parametrize("torch_cached", [False, True])
def test_the_opt_in_writes_bytecode_to_the_private_folder_only(tmp_path, torch_cached):
    """GLMCHECK_PYCACHE=1 under PYTHONDONTWRITEBYTECODE=1: bytecode written, but to the private folder (never beside
    the installed sources), and only where torch has none beside it."""
    code = (f"import glmcheck.startup.bytecode as b, sys; b._has_bytecode = lambda p: {torch_cached}; "
            "print(b.use_private_cache(), sys.pycache_prefix, sys.dont_write_bytecode, sep='|', end='')")
    out = _in_fresh_python(code, tmp_path, PYTHONDONTWRITEBYTECODE="1", GLMCHECK_PYCACHE="1")
    folder = str(tmp_path / "glmcheck" / "pycache")
    assert out == (["None", "None", "True"] if torch_cached else [folder, folder, "False"]), out


def test_without_the_opt_in_profile_names_the_cost_and_the_opt_in(tmp_path):
    code = ("import glmcheck.startup.bytecode as b; b._has_bytecode = lambda p: False; "
            "print(b.use_private_cache(), b.hint(), sep='|', end='')")
    out = _in_fresh_python(code, tmp_path, PYTHONDONTWRITEBYTECODE="1")
    assert out[0] == "None" and "GLMCHECK_PYCACHE=1" in out[1] and "PYTHONDONTWRITEBYTECODE" in out[1], out
    opted = _in_fresh_python(code, tmp_path, PYTHONDONTWRITEBYTECODE="1", GLMCHECK_PYCACHE="1")
    assert opted[0] != "None" and opted[1] == "None", opted  # bytecode is cached now: nothing to advise
    allowed = _in_fresh_python(code.replace("lambda p: False", "lambda p: True"), tmp_path)
    assert allowed[1] == "None", allowed


def test_the_profile_table_carries_the_hint(monkeypatch, capsys):
    """`--profile` (here GLMCHECK_PROFILE=1, any command) prints `hint()`'s line under its table."""
    from glmcheck import cli
    from glmcheck.startup import bytecode

    monkeypatch.setenv("GLMCHECK_PROFILE", "1")
    monkeypatch.setattr(bytecode, "hint", lambda: "imports: a planted hint")
    assert cli.main(["backends"]) == 0
    err = capsys.readouterr().err
    assert "where the time went" in err and err.rstrip().endswith("imports: a planted hint"), err[-300:]
