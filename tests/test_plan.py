"""Plans (`plan_sparse_mla`): a call with a ready plan gives the bits of the call without it, on every path and
with topk_length given or not, reuses the plan across calls that share the indices (IndexShare layers), builds
nothing itself, and refuses a plan that does not match it."""

from __future__ import annotations

import pytest
import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.checks import metrics
from glmcheck.kernels import SparseMLAPlan, plan_sparse_mla, prefill, sparse_mla_prefill
from tests.support.inputs import overlapping_indices

D_V, D_TAIL = 64, 16


def _inputs(tokens, heads, topk, seed, device, with_length):
    indices, kv_rows = overlapping_indices(tokens, topk, seed)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(tokens, heads, D_V + D_TAIL, generator=g).bfloat16().to(device)
    kv = torch.randn(kv_rows, D_V + D_TAIL, generator=g).bfloat16().to(device)
    lengths = torch.randint(0, topk + 1, (tokens,), generator=g, dtype=torch.int32).to(device) if with_length else None
    return q, kv, indices.to(device), lengths


@pytest.mark.parametrize("heads, union", [(8, 0), (8, 2), (8, 8), (16, 4), (1, 0), (3, 0)])
@pytest.mark.parametrize("with_length", [False, True])
def test_plan_gives_the_same_bits_and_is_reused(device, heads, union, with_length):
    q, kv, indices, lengths = _inputs(13, heads, 40, heads + union, device, with_length)
    direct = sparse_mla_prefill(q, kv, indices, 0.125, D_V, topk_length=lengths, union=union)
    plan = plan_sparse_mla(indices, num_kv_rows=kv.shape[0], num_heads=heads, topk_length=lengths, union=union)
    assert isinstance(plan, SparseMLAPlan) and plan.group == (union or 0)
    out = torch.full_like(direct, float("nan"))
    sparse_mla_prefill(q, kv, indices, 0.125, D_V, topk_length=lengths, plan=plan, out=out)
    assert torch.equal(out, direct), "a ready plan must not change a bit"
    q2 = torch.randn_like(q.float()).bfloat16()  # a shared layer: other q and kv, the same indices
    kv2 = torch.randn_like(kv.float()).bfloat16()
    again = sparse_mla_prefill(q2, kv2, indices, 0.125, D_V, topk_length=lengths, plan=plan)
    assert torch.equal(again, sparse_mla_prefill(q2, kv2, indices, 0.125, D_V, topk_length=lengths, union=union))
    exact = sparse_mla_reference(q2, kv2, indices, 0.125, D_V, topk_length=lengths)
    assert metrics.rel_l2(again, exact) < 1e-2


def test_a_call_with_a_plan_builds_nothing(device, monkeypatch):
    q, kv, indices, _ = _inputs(16, 8, 40, 0, device, False)
    plan = plan_sparse_mla(indices, num_kv_rows=kv.shape[0], num_heads=8, union=4)

    def no_build(*args, **kwargs):
        raise AssertionError("the union build ran although a plan was given")

    monkeypatch.setattr(prefill, "build_union_sets", no_build)
    sparse_mla_prefill(q, kv, indices, 0.125, D_V, plan=plan)
    with pytest.raises(AssertionError, match="union build ran"):
        sparse_mla_prefill(q, kv, indices, 0.125, D_V, union=4)


def test_a_plan_that_does_not_match_is_refused(device):
    q, kv, indices, lengths = _inputs(12, 8, 40, 1, device, True)
    plan = plan_sparse_mla(indices, num_kv_rows=kv.shape[0], num_heads=8, topk_length=lengths, union=2)
    cases = [
        ((q[:8], kv, indices[:8]), {"topk_length": lengths[:8]}, "num_tokens"),
        ((q, kv[:-1], indices), {"topk_length": lengths}, "num_kv_rows"),
        ((q[:, :4], kv, indices), {"topk_length": lengths}, "num_heads"),
        ((q, kv, indices), {}, "topk_length given"),
        ((q, kv, indices[:, :32]), {"topk_length": lengths}, "topk"),
        ((q, kv, indices), {"topk_length": lengths, "union": 4}, "union=2"),
    ]
    for args, kw, words in cases:
        with pytest.raises(ValueError, match=words):
            sparse_mla_prefill(*args, 0.125, D_V, plan=plan, **kw)
    with pytest.raises(TypeError, match="SparseMLAPlan"):
        sparse_mla_prefill(q, kv, indices, 0.125, D_V, topk_length=lengths, plan=object())
    with pytest.raises(ValueError, match="num_kv_rows must be an int >= 0"):
        plan_sparse_mla(indices, num_kv_rows=-1, num_heads=8)
    with pytest.raises(ValueError, match="num_heads must be an int >= 1"):
        plan_sparse_mla(indices, num_kv_rows=4, num_heads=0)


def test_deterministic_plan_is_per_token(device):
    q, kv, indices, _ = _inputs(12, 8, 40, 2, device, False)
    plan = plan_sparse_mla(indices, num_kv_rows=kv.shape[0], num_heads=8, union=8, deterministic=True)
    assert plan.group == 0 and plan.union_sets is None
    assert torch.equal(sparse_mla_prefill(q, kv, indices, 0.125, D_V, plan=plan),
                       sparse_mla_prefill(q, kv, indices, 0.125, D_V))


GPU_D_V, GPU_D_TAIL = 512, 64  # the Gluon tiles' geometry


@pytest.mark.gpu
@pytest.mark.parametrize("heads, union, tile", [(8, 8, "gluon-pingpong"), (16, 4, "gluon-pingpong"),
                                                (32, 2, "gluon-pingpong"), (64, 0, "gluon-pingpong"),
                                                (128, 0, "gluon-pingpong"), (8, 0, "triton-token")])
@pytest.mark.parametrize("with_length", [False, True])
def test_gpu_plan_on_every_tile_gives_the_same_bits(heads, union, tile, with_length):
    """At the Gluon tiles' geometry a ready plan changes no bit of any tile's output (poisoned first), with and
    without topk_length, also with int64 KV addressing forced."""
    torch.manual_seed(heads + union)
    tokens, topk = 1024, 512
    indices, kv_rows = overlapping_indices(tokens, topk, heads)
    q = torch.randn(tokens, heads, GPU_D_V + GPU_D_TAIL, device="cuda").bfloat16()
    kv = torch.randn(kv_rows, GPU_D_V + GPU_D_TAIL, device="cuda").bfloat16()
    indices = indices.cuda()
    lengths = torch.randint(0, topk + 1, (tokens,), dtype=torch.int32, device="cuda") if with_length else None
    assert prefill.kernel_route(q, kv, indices, 0.04, GPU_D_V, topk_length=lengths, union=union).tile == tile
    plan = plan_sparse_mla(indices, num_kv_rows=kv_rows, num_heads=heads, topk_length=lengths, union=union)
    for kv_int64 in (None, True):
        direct = prefill.prefill_forced(q, kv, indices, 0.04, GPU_D_V, topk_length=lengths, union=union,
                                        kv_int64=kv_int64)
        out = torch.full_like(direct, float("nan"))
        prefill.prefill_forced(q, kv, indices, 0.04, GPU_D_V, topk_length=lengths, plan=plan, out=out,
                               kv_int64=kv_int64)
        assert torch.equal(out, direct), f"{tile}: a ready plan changed the output"
    exact = sparse_mla_reference(q, kv, indices, 0.04, GPU_D_V, topk_length=lengths)
    assert metrics.rel_l2(out, exact) < 3e-3


@pytest.mark.gpu
@pytest.mark.parametrize("heads, union", [(8, 8), (64, 0)])
def test_gpu_plan_and_its_call_are_captured_in_one_cuda_graph(heads, union):
    """Building a plan syncs nothing with the host: the build and the call it serves are captured in one CUDA
    graph, and a replay after new indices are copied in gives the eager result for those indices."""
    tokens, topk = 512, 256
    first, kv_rows = overlapping_indices(tokens, topk, 1)
    second, _ = overlapping_indices(tokens, topk, 2)
    q = torch.randn(tokens, heads, GPU_D_V + GPU_D_TAIL, device="cuda").bfloat16()
    kv = torch.randn(kv_rows, GPU_D_V + GPU_D_TAIL, device="cuda").bfloat16()
    indices = first.cuda().clone()
    out = torch.full((tokens, heads, GPU_D_V), float("nan"), dtype=torch.bfloat16, device="cuda")

    def step():
        plan = plan_sparse_mla(indices, num_kv_rows=kv_rows, num_heads=heads, union=union)
        sparse_mla_prefill(q, kv, indices, 0.04, GPU_D_V, plan=plan, out=out)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # compile outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    indices.copy_(second.cuda())
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    expected = sparse_mla_prefill(q, kv, indices, 0.04, GPU_D_V, union=union)
    assert torch.equal(out, expected)
