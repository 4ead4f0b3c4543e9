"""The examples a user copies (issue 58): every ```python block of README.md and of the pages under docs/ runs as
written, each in a fresh Python process outside the checkout (CI: on the CPU), without the TRITON_INTERPRET that
the CLI (or CI) would set."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> list[str]:
    return PYTHON_BLOCK.findall(text)


BLOCKS = [(page.relative_to(ROOT).as_posix(), number, block) for page in PAGES
          for number, block in enumerate(python_blocks(page.read_text(encoding="utf-8")), 1)]


def test_the_block_finder_finds_every_python_block():
    text = "intro\n```python\na = 1\n```\n```bash\nls\n```\n  ```python\nindented\n  ```\n```python\nb = 2\n```\n"
    assert python_blocks(text) == ["a = 1\n", "b = 2\n"]
    assert any(page == "README.md" for page, _, _ in BLOCKS), "README.md has no python block: the library example"


@pytest.mark.parametrize("page, number, block", BLOCKS, ids=[f"{page}:{number}" for page, number, _ in BLOCKS])
def test_every_python_block_runs_as_written(page, number, block, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, f"{page}, python block {number}:\n{block}\n{done.stderr[-3000:]}"
