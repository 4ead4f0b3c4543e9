"""Minimal repros (`glmcheck.checks.repro`): a failing call cut by bisection to the fewest tokens and heads that still
FAIL, written with a standalone script that exits 1 on the planted fault and 0 with the correct kernel named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from glmcheck.checks.repro import ddmin, minimise
from tests.support import diagnosis_faults
from tests.test_diagnosis import FAULTS, _small_call

ROOT = Path(__file__).resolve().parents[1]
# Runs the script as `python repro.py ARGS` would, then says whether glmcheck was imported on the way.
RUN = ("import runpy, sys; sys.argv = sys.argv[1:]\ntry:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
       "except SystemExit as e:\n    code = e.code\nprint('glmcheck imported:', 'glmcheck' in sys.modules)\n"
       "sys.exit(code)")


def test_ddmin_finds_the_pair_that_fails():
    budget = [100]
    assert ddmin(list(range(20)), lambda sub: {3, 17} <= set(sub), budget) == [3, 17]


def test_a_cut_keeps_what_the_fault_needs():
    call = _small_call()
    cut = minimise(call, diagnosis_faults.last_slot_dropped)
    assert (len(cut.tokens), len(cut.heads)) == (1, 1) and cut.first.fails and cut.trial.fails

    def from_24(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):  # tied to a position of the call
        out = diagnosis_faults.ideal(q, kv, indices, sm_scale, d_v).clone()
        out[24:] = diagnosis_faults.last_slot_dropped(q[24:], kv, indices[24:], sm_scale, d_v)
        return out

    cut = minimise(call, from_24, max_trials=24)
    assert cut.tokens[-1] >= 24 and len(cut.tokens) == 25
    assert minimise(call, diagnosis_faults.ideal) is None  # a correct kernel has nothing to cut


def test_layer0_repro_script_reproduces_and_passes_once_fixed(tmp_path):
    from glmcheck.evaluate import CheckOptions, layer0

    report = layer0(CheckOptions(backends=f"hs={FAULTS}:heads_swapped", quiet=True), tokens=64, repro=tmp_path / "r")
    entry = report.facts["repros"][0]
    assert entry["reproduces"] and entry["tokens"] <= 64 // 8 and entry["heads"] == 2
    script = Path(entry["script"])
    assert script.parent == tmp_path / "r" / "hs" and (script.parent / "call.safetensors").is_file()
    assert f"python {script}" in report.render()
    run = lambda *args: subprocess.run([sys.executable, "-c", RUN, str(script), *args], cwd=ROOT,  # noqa: E731
                                       capture_output=True, text=True, timeout=300, check=False)
    failing = run()
    assert failing.returncode == 1 and "REPRODUCES" in failing.stdout, failing.stderr
    assert "glmcheck imported: False" in failing.stdout  # standalone: the fault is plain torch
    fixed = run("--kernel", f"fixed={FAULTS}:ideal")
    assert fixed.returncode == 0 and "not reproduced" in fixed.stdout, fixed.stderr


def test_repro_command_remakes_a_record_rows_repro(tmp_path, capsys, monkeypatch):
    from glmcheck import cli

    record = tmp_path / "record"
    argv = ["layer0", "--backends", f"band:5,ls={FAULTS}:last_slot_dropped", "--tokens", "64", "--out", str(record),
            "--quiet"]
    monkeypatch.setattr(sys, "argv", ["glmcheck", *argv])  # what the record keeps as its command line
    assert cli.main(argv) == 1
    assert cli.main(["repro", str(record), "band:5"]) == 2
    assert "ROW 'band:5' is not a FAIL row" in capsys.readouterr().err
    assert cli.main(["repro", str(record), "ls"]) == 1
    assert (record / "repro" / "ls" / "repro.py").is_file() and (record / "repro" / "record" / "summary.json").is_file()


def test_repro_dir_must_be_new_or_empty(tmp_path):
    from glmcheck.evaluate.arguments import check_repro_dir

    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(ValueError, match=r"^repro "):
        check_repro_dir(tmp_path / "taken")
    check_repro_dir(tmp_path / "new")


def test_kernel_spec_names_what_the_script_can_load():
    from glmcheck.backends.registry import register_backend, resolve_backend, unregister_backend
    from glmcheck.checks.repro import kernel_spec

    assert kernel_spec("triton_sparse_mla") == "triton_sparse_mla"
    name = resolve_backend(f"spec_hs={FAULTS}:heads_swapped")
    assert kernel_spec(name) == f"spec_hs={FAULTS}:heads_swapped"
    register_backend("spec_closure", lambda *a, **k: torch.zeros(1))
    try:
        assert kernel_spec("spec_closure") is None
    finally:
        unregister_backend("spec_closure")
