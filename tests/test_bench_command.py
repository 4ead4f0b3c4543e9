"""`glmcheck bench` as a thin command over `glmcheck.evaluate.bench_kernels` / `bench_model` (issue 58 item 5): on
the CPU, with the GPU work stubbed, what it prints, the record it writes (the fields earlier records had, the table
`glmcheck report` reprints) and its exit code."""

from __future__ import annotations

import json

import pytest

from glmcheck import cli
from glmcheck.bench.kernel import BenchResult
from glmcheck.bench.model import PrefillTiming
from tests.support.tamper import assert_tampering_refused

KERNEL_FIELDS = {"command", "environment", "index_mode", "timing", "points", "pair_rounds", "paired", "reference",
                 "kv_cache_dtype", "indices", "rows", "table"}
MODEL_FIELDS = {"command", "environment", "rows", "model", "tp", "indices", "kv_cache_dtype", "table"}


@pytest.fixture
def no_gpu_needed(monkeypatch):
    from glmcheck.evaluate import kernel_bench

    monkeypatch.setattr(kernel_bench, "require_gpu", lambda: None)


def fake_run_point(point, specs, **kwargs):
    return [BenchResult(point, "per-token", 1.0, 2.0e-3, ""), BenchResult(point, "union2", 0.5, 2.1e-3, "")]


def test_kernel_bench_prints_the_table_and_writes_its_record(no_gpu_needed, monkeypatch, tmp_path, capsys):
    from glmcheck.bench import kernel

    monkeypatch.setattr(kernel, "run_point", fake_run_point)
    out = tmp_path / "bench"
    assert cli.main(["bench", "--points", "1x24:8", "--out", str(out), "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("FlashMLA") and lines[1].startswith("TileLang")
    assert lines[2].startswith("timing: eager (the Python call")
    assert lines[-1] == f"record: {out}" and any(line.startswith("| 1x24") for line in lines)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= KERNEL_FIELDS and summary["command"] == "bench" and summary["verdict"] == "PASS"
    assert summary["points"] == "1x24:8" and summary["reference"] == "fp32" and len(summary["rows"]) == 2
    assert summary["table"] in "\n".join(lines)
    assert cli.main(["report", str(out)]) == 0
    assert capsys.readouterr().out.strip() == summary["table"].strip()
    assert_tampering_refused(out, tmp_path, capsys)  # a bench record measures: its verdict is PASS (issue 68)


def test_kernel_bench_refuses_a_bad_pair_in_one_line(no_gpu_needed, monkeypatch, capsys):
    from glmcheck.bench import kernel

    monkeypatch.setattr(kernel, "run_point", fake_run_point)
    assert cli.main(["bench", "--paired", "per-token,nope", "--quiet"]) == 2
    assert "--paired takes two different backends" in capsys.readouterr().err


class FakeModel:
    class config:  # a transformers config's one field the bench reads
        vocab_size = 256


@pytest.mark.parametrize("passed", [True, False])
def test_model_bench_prints_warnings_first_and_exits_on_its_gates(no_gpu_needed, monkeypatch, tmp_path, capsys,
                                                                  passed):
    from glmcheck.backends import choice as backend_choice
    from glmcheck.backends import validation
    from glmcheck.bench import model as bench_model
    from glmcheck.model import load

    monkeypatch.setattr(backend_choice, "default_backends", lambda *args, **kwargs: ["triton_sparse_mla"])
    monkeypatch.setattr(validation, "validate_backends", lambda *args, **kwargs: ["planted warning"])
    monkeypatch.setattr(load, "load_model", lambda spec, device: FakeModel())
    monkeypatch.setattr(bench_model, "bench_prefill", lambda model, lengths, rows, options, **kwargs: [
        PrefillTiming(row.label, n, "pass" if passed else "planted gate failure", passed, 2.0, 1.0, 0.1, 0.05, 4, 1)
        for n in lengths for row in rows])
    out = tmp_path / "bench-model"
    code = cli.main(["bench", "--model", "tiny", "--tokens", "16", "--backends", "triton_sparse_mla",
                     "--out", str(out), "--quiet"])
    assert code == (0 if passed else 1)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "warning: planted warning"
    assert lines[1].startswith("model: ") and lines[2].startswith("schedule: ") and lines[-1] == f"record: {out}"
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= MODEL_FIELDS and summary["command"] == "bench-model" and summary["tp"] == 1
    assert summary["indices"] == "model" and summary["warnings"] == ["planted warning"]
    assert summary["verdict"] == ("PASS" if passed else "FAIL") and summary["table"] in "\n".join(lines)


def test_model_bench_refuses_bad_indices_in_one_line(no_gpu_needed, capsys):
    assert cli.main(["bench", "--model", "tiny", "--indices", "uniform", "--quiet"]) == 2
    assert "--indices with --model takes one of model, calibrated" in capsys.readouterr().err
