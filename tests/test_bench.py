"""Benchmark plumbing on the CPU (interpreter, tiny shapes): the correctness gate comes first."""

from __future__ import annotations

import pytest
import torch

from glmcheck import cli
from glmcheck.bench import BenchPoint, BenchSpec, D_V, default_specs, render_table, run_point
from glmcheck.kernels import sparse_mla_prefill


def fake_timer(calls: list):
    def timer(fn, rep_ms=100):
        fn()
        calls.append(fn)
        return 1.0
    return timer


def wrong_scale(x, out):
    """A planted wrong backend: the softmax scale is off by 10 %."""
    return sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale * 1.1, D_V, out=out)


def test_gate_rejects_a_wrong_backend_before_timing():
    timed: list = []
    specs = [s for s in default_specs(flashmla=False) if s.name in ("per-token", "union2")]
    specs.append(BenchSpec("planted:wrong-scale", wrong_scale))
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the interpreter only runs CPU tensors
    results = run_point(BenchPoint(1, 40, 8), specs, topk=16, device=device, timer=fake_timer(timed))
    by_name = {r.backend: r for r in results}
    assert by_name["per-token"].ms == 1.0 and by_name["union2"].ms == 1.0
    wrong = by_name["planted:wrong-scale"]
    assert wrong.ms is None and "gate failed" in wrong.note and wrong.rel_l2 > 3e-3
    assert by_name["build2"].ms == 1.0 and by_name["build4"].ms == 1.0 and by_name["build8"].ms == 1.0
    assert len(timed) == 5, "the failed backend must never reach the timer"
    table = render_table(results)
    assert "planted:wrong-scale ms" in table and "| -" in table


def test_bench_refuses_on_cpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert cli.main(["bench", "--quick"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
