"""The tree passes the project's ruff rules ([tool.ruff.lint] in pyproject.toml; ruff pinned in the test extra, so
a new ruff release cannot fail or pass a commit by itself). Ruff takes under a second on the whole tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def test_ruff_is_the_pinned_one():
    pinned = next(line for line in (ROOT / "pyproject.toml").read_text().splitlines() if '"ruff==' in line)
    version = pinned.split('"ruff==', 1)[1].split('"', 1)[0]
    found = _ruff("--version")
    assert found.returncode == 0, f"ruff is not installed (pip install -e '.[test]'): {found.stderr.strip()}"
    assert found.stdout.split()[-1] == version, f"ruff {found.stdout.strip()} installed, the test extra pins {version}"


def test_the_tree_passes_ruff():
    found = _ruff("check", "--no-cache", "--output-format", "concise", ".")
    assert found.returncode == 0, f"ruff check found:\n{found.stdout[-4000:]}{found.stderr[-2000:]}"


def test_ruff_would_catch_a_planted_finding(tmp_path):
    # The gate can fail: a file with an unused import and a bare `except:` under the project's configuration.
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "planted.py").write_text("import os\n\ntry:\n    x = 1\nexcept:\n    pass\n")
    found = _ruff("check", "--no-cache", "--output-format", "concise", ".", cwd=tmp_path)
    assert found.returncode == 1, found.stdout + found.stderr
    assert "F401" in found.stdout and "E722" in found.stdout, found.stdout

