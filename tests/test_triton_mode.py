"""The library chooses where Triton runs as the CLI does (issue 58, item 2): on a machine without a GPU, a
fresh Python process that imports glmcheck runs the Triton kernel in the interpreter even after transformers'
model code has imported Triton; Triton imported before glmcheck is one line saying what to do, not Triton's
error from inside a kernel. `glmcheck.process.triton_mode`'s two steps are checked one by one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from glmcheck.process import triton_mode

ROOT = Path(__file__).resolve().parents[1]
needs_cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter is chosen on CPU machines")


def run_fresh(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter outside the checkout, without a TRITON_INTERPRET of ours (CI exports one)."""
    env = {k: v for k, v in os.environ.items() if k != triton_mode.VARIABLE}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@needs_cpu_only
def test_the_kernel_runs_from_python_after_transformers_imported_triton(tmp_path):
    done = run_fresh("""
        import sys
        import torch
        from glmcheck.model import build_dummy_model, make_config

        model = build_dummy_model(make_config("tiny", layers=1), seed=0)
        assert "triton" in sys.modules and "glmcheck.kernels" not in sys.modules  # transformers imported Triton
        from glmcheck.model import use_backend

        with use_backend(model, "triton_sparse_mla") as session:
            model(torch.randint(3, 259, (1, 16)))
        print("calls", dict(session.calls))
    """, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "calls {0: 1}" in done.stdout


@needs_cpu_only
def test_triton_imported_before_glmcheck_is_one_line_saying_what_to_do(tmp_path):
    done = run_fresh("""
        import triton
        import torch
        from glmcheck.kernels import sparse_mla_prefill

        q = torch.randn(2, 1, 32, dtype=torch.bfloat16)
        kv = torch.randn(4, 32, dtype=torch.bfloat16)
        indices = torch.tensor([[0, -1], [0, 1]], dtype=torch.int32)
        try:
            sparse_mla_prefill(q, kv, indices, 0.1, d_v=16)
        except RuntimeError as err:
            print("refused:", err)
    """, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    line = done.stdout.strip()
    assert line.startswith("refused: Triton was imported before glmcheck") and "\n" not in line, line
    assert "TRITON_INTERPRET=1 before starting Python" in line


def test_import_chooses_the_interpreter_only_where_there_is_certainly_no_gpu(monkeypatch):
    monkeypatch.delenv(triton_mode.VARIABLE, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(triton_mode, "_state", {"set_by": None, "triton_was_imported": False})
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(triton_mode.glob, "glob", lambda pattern: ["/dev/nvidia0"] if "nvidia[" in pattern else [])
    triton_mode.choose_at_import()
    assert triton_mode.VARIABLE not in os.environ  # a GPU device node: torch decides later
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # every GPU hidden
    triton_mode.choose_at_import()
    assert os.environ[triton_mode.VARIABLE] == "1" and triton_mode._state["set_by"] == "import"
    monkeypatch.delenv(triton_mode.VARIABLE)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(triton_mode.glob, "glob", lambda pattern: [])  # no GPU device node
    triton_mode.choose_at_import()
    assert os.environ[triton_mode.VARIABLE] == "1"


def test_a_choice_the_user_made_is_kept(monkeypatch):
    monkeypatch.setenv(triton_mode.VARIABLE, "0")
    monkeypatch.setattr(triton_mode, "_state", {"set_by": None, "triton_was_imported": False})
    monkeypatch.setattr(triton_mode, "certainly_no_gpu", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    triton_mode.choose_at_import()
    triton_mode.confirm_with_torch()
    assert os.environ[triton_mode.VARIABLE] == "0" and triton_mode.late_import_problem() is None


def test_torch_takes_back_a_wrong_guess_while_triton_is_not_imported(monkeypatch):
    monkeypatch.setenv(triton_mode.VARIABLE, "1")
    monkeypatch.setattr(triton_mode, "_state", {"set_by": "import", "triton_was_imported": False})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    triton_mode.confirm_with_torch()
    assert triton_mode.VARIABLE not in os.environ and triton_mode._state["set_by"] is None
