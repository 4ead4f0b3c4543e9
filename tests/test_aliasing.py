"""Issue 44, item 6: silent wrong results in the library. An `out` that shares memory with any input, and a plan used
with indices or a topk_length other than the tensors it was built from (another tensor of the same shape, or the
same one written in place), are refused naming what differs; the tensors a plan was built from, unchanged, still
run, also in torch.inference_mode (the harness's), where tensors keep no version counter."""

from __future__ import annotations

import pytest
import torch

from glmcheck.checks import metrics
from glmcheck.kernels import plan_sparse_mla, sparse_mla_prefill
from tests.support.inputs import overlapping_indices

D_V, D_TAIL, T, H, TOPK = 64, 16, 12, 8, 24


@pytest.fixture
def inputs(device):
    indices, rows = overlapping_indices(T, TOPK, 4)
    g = torch.Generator().manual_seed(4)
    q = torch.randn(T, H, D_V + D_TAIL, generator=g).bfloat16().to(device)
    kv = torch.randn(rows, D_V + D_TAIL, generator=g).bfloat16().to(device)
    lengths = torch.randint(1, TOPK + 1, (T,), generator=g, dtype=torch.int32).to(device)
    return q, kv, indices.to(device), lengths


def _region(buffer: torch.Tensor, offset_elems: int) -> torch.Tensor:
    return buffer.view(-1)[offset_elems:offset_elems + T * H * D_V].view(T, H, D_V)


@pytest.mark.parametrize("target", ["q", "kv", "indices", "topk_length"])
def test_out_that_overlaps_an_input_is_refused(inputs, target):
    q, kv, indices, lengths = inputs
    if target == "q":  # q's storage, extended so that an [T, H, d_v] bf16 view fits in it
        big = torch.cat([q.reshape(-1), torch.zeros(T * H * D_V, dtype=q.dtype, device=q.device)])
        q, out = big[:q.numel()].view(q.shape), _region(big, q.numel() // 2)
    elif target == "kv":
        big = torch.zeros(kv.numel() + T * H * D_V, dtype=kv.dtype, device=kv.device)
        big[:kv.numel()] = kv.reshape(-1)
        kv, out = big[:kv.numel()].view(kv.shape), _region(big, 8)
    else:  # an int32 index tensor carved out of the bf16 output's own bytes
        out = torch.zeros(T, H, D_V, dtype=torch.bfloat16, device=q.device)
        ints = out.view(-1).view(torch.int32)
        if target == "indices":
            ints[:indices.numel()] = indices.reshape(-1)
            indices = ints[:indices.numel()].view(indices.shape)
        else:
            ints[-T:] = lengths
            lengths = ints[-T:]
    with pytest.raises(ValueError, match=f"out must not overlap {target}: they share memory"):
        sparse_mla_prefill(q, kv, indices, 0.125, D_V, topk_length=lengths, out=out)


def test_disjoint_views_of_one_buffer_are_fine(inputs):
    q, kv, indices, lengths = inputs
    big = torch.zeros(kv.numel() + T * H * D_V, dtype=kv.dtype, device=kv.device)
    big[:kv.numel()] = kv.reshape(-1)
    out = _region(big, kv.numel())
    got = sparse_mla_prefill(q, big[:kv.numel()].view(kv.shape), indices, 0.125, D_V, topk_length=lengths, out=out)
    assert torch.equal(got, sparse_mla_prefill(q, kv, indices, 0.125, D_V, topk_length=lengths))


@pytest.mark.parametrize("union", [0, 2])
def test_a_plan_refuses_other_indices_and_lengths_of_the_same_shape(inputs, union):
    q, kv, indices, lengths = inputs
    plan = plan_sparse_mla(indices, num_kv_rows=kv.shape[0], num_heads=H, topk_length=lengths, union=union)
    other = indices.flip(0).contiguous()
    with pytest.raises(ValueError, match=r"plan does not match the call: indices is another tensor than the plan was "
                                         r"built from \(data_ptr 0x"):
        sparse_mla_prefill(q, kv, other, 0.125, D_V, topk_length=lengths, plan=plan)
    with pytest.raises(ValueError, match="topk_length is another tensor than the plan was built from"):
        sparse_mla_prefill(q, kv, indices, 0.125, D_V, topk_length=lengths.flip(0).contiguous(), plan=plan)
    with pytest.raises(ValueError, match=r"indices is another tensor .*\(stride \(1, 12\) in the call, \(24, 1\)"):
        sparse_mla_prefill(q, kv, indices.as_strided(indices.shape, (1, T)), 0.125, D_V, topk_length=lengths,
                           plan=plan)
    same = sparse_mla_prefill(q, kv, indices, 0.125, D_V, topk_length=lengths, plan=plan)
    assert torch.equal(same, sparse_mla_prefill(q, kv, indices, 0.125, D_V, topk_length=lengths, union=union))


def test_a_plan_refuses_indices_written_in_place(inputs):
    q, kv, indices, lengths = inputs
    plan = plan_sparse_mla(indices, num_kv_rows=kv.shape[0], num_heads=H, topk_length=lengths, union=2)
    indices[3, 0] = indices[3, 1]
    with pytest.raises(ValueError, match=r"indices was written in place after the plan was built \(version 1 in the "
                                         r"call, 0 in the plan\)"):
        sparse_mla_prefill(q, kv, indices, 0.125, D_V, topk_length=lengths, plan=plan)
    lengths.copy_(lengths.flip(0))
    plan = plan_sparse_mla(indices, num_kv_rows=kv.shape[0], num_heads=H, topk_length=lengths, union=2)
    lengths.clamp_(max=TOPK // 2)
    with pytest.raises(ValueError, match="topk_length was written in place"):
        sparse_mla_prefill(q, kv, indices, 0.125, D_V, topk_length=lengths, plan=plan)


def test_a_plan_under_inference_mode_and_a_3d_view_still_runs(inputs):
    q, kv, indices, lengths = inputs
    with torch.inference_mode():
        idx = indices.clone()[:, None, :]  # an inference tensor, [T, 1, topk]: no version counter
        plan = plan_sparse_mla(idx, num_kv_rows=kv.shape[0], num_heads=H, topk_length=lengths, union=2)
        out = sparse_mla_prefill(q, kv, idx, 0.125, D_V, topk_length=lengths, plan=plan)
        with pytest.raises(ValueError, match="indices is another tensor"):
            sparse_mla_prefill(q, kv, idx.clone(), 0.125, D_V, topk_length=lengths, plan=plan)
    assert metrics.rel_l2(out, sparse_mla_prefill(q, kv, indices, 0.125, D_V, topk_length=lengths)) < 1e-2


def test_a_plan_for_more_heads_than_the_kernel_takes_is_refused(inputs):
    """Issue 44, item 7: plan_sparse_mla(num_heads=1000) was accepted; no call could use the plan."""
    with pytest.raises(ValueError, match=r"num_heads must be at most 128 \(the kernel takes 1..128 heads\), got 1000"):
        plan_sparse_mla(inputs[2], num_kv_rows=inputs[1].shape[0], num_heads=1000)
    assert plan_sparse_mla(inputs[2], num_kv_rows=inputs[1].shape[0], num_heads=128).num_heads == 128


@pytest.mark.parametrize("make", [
    lambda b: b[:6].view(2, 3), lambda b: b[2:14].view(3, 4).t(), lambda b: b[1:13:2], lambda b: b[5:6].expand(4, 3),
    lambda b: b[3:3], lambda b: b.view(torch.int32)[1:4], lambda b: b[4:16].view(2, 2, 3)[:, :, 1:],
], ids=["contiguous", "transposed", "strided", "expanded", "empty", "int32-view", "sliced-last-dim"])
def test_byte_span_is_the_first_and_past_the_last_byte_any_element_occupies(make):
    """The span `check_out` compares (a contiguous fast path and the stride sum) equals the bytes counted element by
    element."""
    from glmcheck.kernels.validate import _byte_span

    tensor = make(torch.zeros(32, dtype=torch.bfloat16))
    if tensor.numel() == 0:
        assert _byte_span(tensor) == (0, 0)
        return
    offsets = torch.zeros((), dtype=torch.int64)
    for size, stride in zip(tensor.shape, tensor.stride()):
        offsets = offsets.unsqueeze(-1) + torch.arange(size) * stride
    size = tensor.element_size()
    expected = (tensor.data_ptr() + int(offsets.min()) * size, tensor.data_ptr() + (int(offsets.max()) + 1) * size)
    assert _byte_span(tensor) == expected
