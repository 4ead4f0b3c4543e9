"""The model bench's logic on tiny (CPU): rows, gates, plan counts, attention spans, the table."""

from __future__ import annotations

import pytest
import torch

from glmcheck.backends import register_backend, unregister_backend
from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.bench.model import (
    ModelRow,
    PrefillTiming,
    bench_prefill,
    default_rows,
    parse_rows,
    schedule_ms,
    weighting_schedule,
)
from glmcheck.bench.tables import render_model_table
from glmcheck.checks.runner import SwapOptions
from glmcheck.data.indices import calibrated_indices, calibrated_selector
from glmcheck.model import build_dummy_model, make_config
from glmcheck.model.absorbed import kernel_indices


def test_rows_parse_their_flags_and_the_default_set_pairs_each_union():
    assert parse_rows("flashmla_sparse+len, triton_sparse_mla:union8+len+rebuild,hf_sdpa") == [
        ModelRow("flashmla_sparse", True), ModelRow("triton_sparse_mla:union8", True, False), ModelRow("hf_sdpa")]
    assert ModelRow("x", True, False).label == "x+len+rebuild" and not ModelRow("hf_sdpa").absorbed
    with pytest.raises(ValueError, match="--backends takes NAME"):
        parse_rows("+len")
    labels = [row.label for row in default_rows([2, 8], flashmla=True)]
    assert labels == ["flashmla_sparse+len", "triton_sparse_mla+len", "triton_sparse_mla:union2+len",
                      "triton_sparse_mla:union2+len+rebuild", "triton_sparse_mla:union8+len",
                      "triton_sparse_mla:union8+len+rebuild", "hf_sdpa"]


def test_schedule_weights_each_layer_kind():
    timing = PrefillTiming("r", 8, "ok", True, 10.0, 5.0, full_layer_ms=2.0, shared_layer_ms=1.0)
    assert schedule_ms(timing, 21, 57, 8) == pytest.approx((21 * 2.0 + 57 * 1.0) / 8)
    assert schedule_ms(PrefillTiming("r", 8, "ok", True, 1.0, 1.0, full_layer_ms=2.0), 3, 0, 1) == 6.0
    assert schedule_ms(PrefillTiming("hf", 8, "ok", True, 1.0), 3, 1, 1) is None


def test_schedule_is_the_presets_whole_depth_whatever_layers_ran():
    """--layers only truncates the model to fit: the per-kind means are weighted over the named model's own
    indexer schedule (GLM-5.2: 21 full, 57 shared), not the truncated model's (8 layers: 4 and 4)."""
    from glmcheck.model.load import ModelSpec

    schedule = weighting_schedule(ModelSpec("glm-5.2", layers=8, experts=16))
    assert (schedule.count("full"), schedule.count("shared")) == (21, 57)
    tiny = weighting_schedule(ModelSpec("tiny", layers=1))
    assert tiny == ["full", "shared", "full"]
    assert weighting_schedule(ModelSpec("ref-cpu")) == ["full", "shared", "full"]  # a checkpoint's own layers


def _scaled(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    out = sparse_mla_reference(q, kv, indices, sm_scale, d_v, topk_length=topk_length, dtype=torch.float32)
    return (out * 1.01).to(torch.bfloat16)  # a 1 % output fault


def test_bench_gates_times_and_counts_each_row():
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the interpreter runs CPU tensors only
    model = build_dummy_model(make_config("tiny"), seed=3, init="sharp").to(device)
    rows = [ModelRow("triton_sparse_mla:union2", True), ModelRow("triton_sparse_mla:union2", True, False),
            ModelRow("band:1"), ModelRow("scaled_bench_test"), ModelRow("hf_sdpa")]
    register_backend("scaled_bench_test", _scaled, "test")
    try:
        timings = bench_prefill(model, [16], rows, SwapOptions(tp=2, selector=calibrated_selector()), repeats=1)
    finally:
        unregister_backend("scaled_bench_test")
    by_row = {t.row: t for t in timings}
    reused, rebuilt = by_row["triton_sparse_mla:union2+len"], by_row["triton_sparse_mla:union2+len+rebuild"]
    assert reused.passed and rebuilt.passed and "bitwise" in rebuilt.gate
    assert (reused.plan_builds, rebuilt.plan_builds, reused.kernel_calls) == (4, 6, 6)
    assert reused.attention_ms > 0 and reused.full_layer_ms > 0 and reused.shared_layer_ms > 0
    assert by_row["band:1"].passed and by_row["band:1"].plan_builds == 0
    fault = by_row["scaled_bench_test"]
    assert not fault.passed and fault.median_ms is None and "layer-0 rel-L2" in fault.gate
    hf = by_row["hf_sdpa"]
    assert hf.passed and hf.median_ms > 0 and hf.attention_ms is None
    table = render_model_table(timings, 2, 21, 57, baseline="band:1")
    assert "not ranked (dense masked attention)" in table and "16 tokens: best union with plans reused" in table
    assert "with a build per layer triton_sparse_mla:union2+len+rebuild" in table


def test_calibrated_selector_draws_causal_local_rows_once():
    select = calibrated_selector(seed=1)
    first = select(0, 2, 40, 16, torch.device("cpu"))
    assert first.shape == (2, 40, 16) and first.dtype == torch.int32
    assert select(0, 2, 40, 16, torch.device("cpu")) is first and not torch.equal(select(2, 2, 40, 16, "cpu"), first)
    position = torch.arange(40).view(1, 40, 1)
    assert bool(((first >= 0) & (first < 40)).all())  # every slot a position, as the indexer returns
    causal = first <= position
    assert bool((causal.sum(-1) == torch.clamp(position[..., 0] + 1, max=16)).all())  # t + 1 causal rows, then pads
    assert torch.equal(kernel_indices(first), calibrated_indices([40, 40], 16, seed=1))
