"""Plans reused along the indexer schedule (tiny, CPU interpreter or GPU): one plan per full indexer
layer and rank slice, bit for bit the forward that builds a plan for every call; attention spans;
topk_length from the harness; a selector replacing the indexer's top-k."""

from __future__ import annotations

import contextlib

import pytest
import torch

from glmcheck.backends import get_backend, register_backend, unregister_backend
from glmcheck.checks.capture import capture
from glmcheck.checks.runner import SwapOptions, forward_under
from glmcheck.kernels import plan_sparse_mla, sparse_mla_prefill
from glmcheck.model import build_dummy_model, make_config, use_backend

TOKENS = 20


@pytest.fixture(scope="module")
def tiny():
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the interpreter runs CPU tensors only
    return build_dummy_model(make_config("tiny"), seed=3, init="sharp").to(device)


@pytest.fixture(scope="module")
def prompt():
    return torch.randint(0, 512, (1, TOKENS), generator=torch.Generator().manual_seed(5))


def _forward(model, prompt, backend, **options):
    device = next(model.parameters()).device
    return forward_under(model, prompt.to(device), backend, SwapOptions(tp=2, **options), latent_layers=[0, 1, 2],
                         time_attention=True)


# The per-token case runs on the GPU only: below 17 heads its plan holds nothing on the CPU, and CI's time is short.
@pytest.mark.parametrize("backend", ["triton_sparse_mla:union4",
                                     pytest.param("triton_sparse_mla", marks=pytest.mark.gpu)])
def test_reused_plans_give_the_rebuilt_forward_bit_for_bit(tiny, prompt, backend):
    reused = _forward(tiny, prompt, backend)
    rebuilt = _forward(tiny, prompt, backend, reuse_plans=False)
    full = [layer for layer, kind in enumerate(tiny.config.indexer_types) if kind == "full"]
    assert dict(reused.plan_builds) == dict.fromkeys(full, 2)  # one per full layer and rank slice
    assert dict(rebuilt.plan_builds) == dict.fromkeys(range(tiny.config.num_hidden_layers), 2)
    assert dict(reused.calls) == dict(rebuilt.calls) == dict.fromkeys(range(3), 2)
    assert torch.equal(reused.captured.logits, rebuilt.captured.logits)
    for layer in range(3):
        assert torch.equal(reused.captured.latent[layer], rebuilt.captured.latent[layer])
    assert sorted(reused.attention_ms) == [0, 1, 2] and all(ms > 0 for ms in reused.attention_ms.values())


def test_backends_without_a_planner_build_nothing(tiny, prompt):
    run = _forward(tiny, prompt, "reference")
    assert not run.plan_builds and sum(run.calls.values()) == 6


def test_the_glm52_schedule_at_eight_layers_has_four_full_layers():
    assert make_config("glm-5.2", layers=8).indexer_types.count("full") == 4


def test_a_plugin_planner_gets_its_plan_in_every_call_of_its_selection(tiny, prompt):
    seen = []

    def planner(indices, *, num_kv_rows, num_heads, topk_length=None):
        return plan_sparse_mla(indices, num_kv_rows=num_kv_rows, num_heads=num_heads, topk_length=topk_length,
                               union=2)

    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None, plan=None):
        seen.append(plan)
        return sparse_mla_prefill(q, kv, indices, sm_scale, d_v, topk_length=topk_length, plan=plan)

    register_backend("planned_test_kernel", kernel, "test", planner=planner)
    try:
        run = _forward(tiny, prompt, "planned_test_kernel")
    finally:
        unregister_backend("planned_test_kernel")
    assert len(seen) == 6 and all(plan is not None for plan in seen)
    assert seen[0] is seen[2] and seen[1] is seen[3]  # layer 1 (shared) reuses layer 0's plan per rank
    assert seen[4] is not seen[0] and sum(run.plan_builds.values()) == 4


def test_harness_lengths_count_a_valid_prefix_and_change_nothing(tiny, prompt):
    device = next(tiny.parameters()).device
    with use_backend(tiny, "reference", tp=2, topk_length=True) as session, \
            capture(tiny, session, latent_layers=[0], index_layers=[0, 2]) as got, torch.inference_mode():
        tiny(prompt.to(device))
    for layer in (0, 2):
        indices = got.indices[layer]
        lengths = (indices >= 0).sum(1)
        slot = torch.arange(indices.shape[1])
        assert torch.equal(indices >= 0, slot[None, :] < lengths[:, None])  # valid slots are a prefix
    without = _forward(tiny, prompt, "reference")
    assert torch.equal(got.latent[0], without.captured.latent[0])


def test_a_selector_replaces_every_indexers_topk(tiny, prompt):
    calls = []

    def selector(layer, batch, seq, topk, device):
        calls.append(layer)
        chosen = torch.arange(topk, dtype=torch.int32, device=device).expand(batch, seq, topk)
        return chosen.contiguous()  # every token selects rows 0..topk-1 (those past it become -1)

    device = next(tiny.parameters()).device
    with use_backend(tiny, "reference", selector=selector) as session, \
            capture(tiny, session, index_layers=[0, 1, 2]) as got, torch.inference_mode():
        tiny(prompt.to(device))
    assert calls == [0, 2]
    topk = got.indices[0].shape[1]
    expected = torch.where(torch.arange(topk)[None, :] <= torch.arange(TOKENS)[:, None],
                           torch.arange(topk)[None, :], -1).to(torch.int32)
    for layer in range(3):
        assert torch.equal(got.indices[layer], expected)
    with (pytest.raises(ValueError, match="selector and dense_threshold"),
          use_backend(tiny, "reference", selector=selector, dense_threshold=4)):
        pass


def test_a_selector_of_the_wrong_shape_is_named(tiny, prompt):
    device = next(tiny.parameters()).device

    def bad(layer, batch, seq, topk, device):
        return torch.zeros(batch, seq, topk + 1, dtype=torch.int32, device=device)

    with (pytest.raises(ValueError, match="index selector must return"), use_backend(tiny, "reference", selector=bad),
          torch.inference_mode()):
        tiny(prompt.to(device))


def test_a_plan_with_the_wrong_heads_is_refused_through_the_backend(device):
    backend = get_backend("triton_sparse_mla:union2")
    indices = torch.zeros(4, 8, dtype=torch.int32, device=device)
    plan = backend.plan(indices, 16, 8)
    assert backend.plan_builds == 1
    q, kv = torch.randn(4, 16, 80, device=device).bfloat16(), torch.randn(16, 80, device=device).bfloat16()
    with pytest.raises(ValueError, match=r"num_heads \(H\) is 16 in the call, 8 in the plan"):
        backend(q, kv, indices, 0.1, 64, plan=plan)


def test_the_attention_clock_spans_backend_calls_and_builds_but_not_the_tp_copies(monkeypatch):
    """With tp = 4 the span of a layer's attention holds the four backend calls and their plan builds, and
    none of the emulation's copies (each rank's query slice made contiguous, the outputs joined), which
    a rank on its own GPU does not make; the joined output is each rank's output in head order."""
    from glmcheck.backends.registry import Backend
    from glmcheck.model.swap import SwapSession

    events: list[str] = []

    class Clock:
        @contextlib.contextmanager
        def span(self, layer, device):
            events.append("open")
            yield
            events.append("close")

    def fn(q, kv, indices, sm_scale, d_v=512, *, topk_length=None, plan=None):
        events.append("call")
        return q[..., :d_v] * 2

    def planner(indices, *, num_kv_rows, num_heads, topk_length=None):
        events.append("plan")
        return object()

    real_contiguous, real_cat = torch.Tensor.contiguous, torch.cat
    monkeypatch.setattr(torch.Tensor, "contiguous", lambda self, *a, **k: (events.append("copy"),
                                                                          real_contiguous(self, *a, **k))[1])
    monkeypatch.setattr(torch, "cat", lambda *a, **k: (events.append("join"), real_cat(*a, **k))[1])
    session = SwapSession("spy", Backend("spy", fn, "test", planner=planner, fp32_output=True), 4, None, None,
                          clock=Clock())
    q = torch.randn(6, 8, 12)
    out = session._run_ranks(0, q, torch.zeros(6, 12), torch.zeros(6, 3, dtype=torch.int32), None, {}, 1.0, 5)
    assert events == ["copy"] * 4 + ["open"] + ["plan", "call"] * 4 + ["close", "join"]
    assert torch.equal(out, q[..., :5] * 2)
