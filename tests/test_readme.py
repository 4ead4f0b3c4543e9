"""The README as a user reads it (issue 58): every ```python block runs as written, each in a fresh Python process
outside the checkout (CI: on the CPU), without the TRITON_INTERPRET that the CLI (or CI) would set."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    return PYTHON_BLOCK.findall(text)


BLOCKS = python_blocks(README.read_text(encoding="utf-8"))


def test_the_block_finder_finds_every_python_block():
    text = "intro\n```python\na = 1\n```\n```bash\nls\n```\n  ```python\nindented\n  ```\n```python\nb = 2\n```\n"
    assert python_blocks(text) == ["a = 1\n", "b = 2\n"]
    assert BLOCKS, "README.md has no python block: the library example is gone"


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_every_python_block_of_the_readme_runs_as_written(number, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", BLOCKS[number]], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"README python block {number + 1}:\n{BLOCKS[number]}\n{done.stderr[-3000:]}"
