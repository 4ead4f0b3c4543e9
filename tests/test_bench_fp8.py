"""The kernel bench over an FP8 KV cache (issue 57; CPU, interpreter, tiny shapes, FlashMLA's op stood in for): the
rows are the pool's values, our paths are gated and timed with and without the dequantisation, FlashMLA's FP8
decode kernel reads the pool itself; a wrong pool fails its gate and is never timed."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from glmcheck.backends import flashmla_kv
from glmcheck.bench.kernel import BenchPoint, BenchSpec, default_specs, fp8_specs, make_inputs, run_point
from glmcheck.kernels.fp8 import dequantize_kv_pool, quantize_kv_pool
from tests.support.flashmla_standin import StandIn


def _timer(calls: list):
    def timer(fn, rep_ms=100):
        fn()
        calls.append(fn)
        return 1.0
    return timer


def test_fp8_inputs_are_the_pools_values():
    x = make_inputs(BenchPoint(1, 70, 8), topk=16, device="cpu", kv_cache_dtype="fp8_e4m3")
    assert x.pool is not None and x.pool.shape == (2, 64, 1, 656)
    assert torch.equal(x.kv, dequantize_kv_pool(x.pool, 70))
    assert torch.equal(dequantize_kv_pool(quantize_kv_pool(x.kv), 70), x.kv), "already FP8 values"
    assert make_inputs(BenchPoint(1, 70, 8), topk=16, device="cpu").pool is None
    with pytest.raises(ValueError, match=r"--kv-cache-dtype must be bf16 or fp8_e4m3"):
        make_inputs(BenchPoint(1, 70, 8), topk=16, device="cpu", kv_cache_dtype="fp8")


def test_every_fp8_column_is_gated_then_timed(monkeypatch, device):
    monkeypatch.setattr(flashmla_kv, "_decode_op", lambda: StandIn(12))
    names = [s.name for s in default_specs(flashmla=False, kv_cache_dtype="fp8_e4m3")]
    assert {"per-token+len+deq", "union2+len+deq", "union4+len+deq", "union8+len+deq"} <= set(names)
    assert "flashmla_kv" not in names and "flashmla_kv" in [s.name for s in fp8_specs(flashmla=True)]
    dequantised = next(s for s in fp8_specs(flashmla=False) if s.name == "per-token+len+deq")
    specs = [s for s in fp8_specs(flashmla=True) if s.name in ("per-token+len+deq", "union2+len+deq", "flashmla_kv")]
    specs += [s for s in default_specs(flashmla=False) if s.name == "per-token+len"]

    def wrong_pool(x, out):  # reads the bf16 rows' own pool of a different KV: must fail its gate
        rows = dequantize_kv_pool(quantize_kv_pool(torch.flip(x.kv, dims=[0])), x.kv.shape[0])
        return flashmla_kv.flashmla_kv_on_pool(x.q, quantize_kv_pool(rows), x.indices, x.sm_scale, 512,
                                               num_rows=x.kv.shape[0], topk_length=x.topk_length)

    def wrong_scale_tile(x, out):  # the +len+deq column over a pool whose scales moved one tile on: must fail its gate
        pool = x.pool.clone()
        scales = pool.view(-1, 656)[:, 512:528]
        scales.copy_(torch.roll(scales.reshape(-1, 4, 4), 1, dims=1).reshape(-1, 16))
        return dequantised.run(replace(x, pool=pool), out)
    specs += [BenchSpec("planted:wrong-pool", wrong_pool), BenchSpec("planted:wrong-scale-tile", wrong_scale_tile)]
    timed: list = []
    results = {r.backend: r for r in run_point(BenchPoint(1, 40, 8), specs, topk=16, device=device,
                                                timer=_timer(timed), kv_cache_dtype="fp8_e4m3")}
    for name in ("per-token+len", "per-token+len+deq", "union2+len+deq", "flashmla_kv"):
        assert results[name].ms == 1.0 and results[name].rel_l2 < 3e-3, (name, results[name])
    assert results["per-token+len+deq"].rel_l2 == results["per-token+len"].rel_l2, "the same rows, the same bits"
    for name in ("planted:wrong-pool", "planted:wrong-scale-tile"):
        assert results[name].ms is None and "gate failed" in results[name].note, results[name]


def test_the_fp8_table_sets_flashmla_kv_against_our_fastest_path():
    """With a flashmla_kv column the table adds its ratios: against the fastest exact path with the dequantisation
    in the call, and on the pool's values; the geomean per head count over the first."""
    from glmcheck.bench.kernel import BenchResult
    from glmcheck.bench.tables import render_table

    a, b = BenchPoint(1, 2048, 8), BenchPoint(1, 8192, 64)
    results = [BenchResult(a, "per-token+len", 1.0, 1e-3, ""), BenchResult(a, "per-token+len+deq", 1.5, 1e-3, ""),
               BenchResult(a, "union2+len+deq", 1.25, 1e-3, ""), BenchResult(a, "flashmla_kv", 5.0, 1e-3, ""),
               BenchResult(b, "per-token+len", 2.0, 1e-3, ""), BenchResult(b, "per-token+len+deq", 2.5, 1e-3, ""),
               BenchResult(b, "flashmla_kv", 5.0, 1e-3, "")]
    text = render_table(results)
    assert "| 1x2048 H=8  | 5.000          | 1.250                | 1.000            | 4.00x" in text, text
    assert "| 1x8192 H=64 | 5.000          | 2.500                | 2.000            | 2.00x" in text, text
    assert text.rstrip().endswith("geomean of flashmla_kv / best ours+len+deq: H=8 4.00x over 1 point; H=64 2.00x "
                                  "over 1 point")
    assert "flashmla_kv /" not in render_table([r for r in results if r.backend != "flashmla_kv"])

