"""The per-token sparse-MLA prefill kernel against the fp64 reference (poisoned outputs)."""

from __future__ import annotations

import pytest
import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.data.indices import drifting_indices
from glmcheck.data.inputs import poisoned_out, random_inputs, random_qkv
from glmcheck.kernels import sparse_mla_prefill
from glmcheck.kernels.prefill import prefill_forced
from tests.support.checks import assert_close_to_reference

# (T, S, topk, d_v, d_tail): an odd T, a wider head dim, no rope tail, a tail narrower than 16.
BASE_SHAPES = [(37, 160, 64, 64, 16), (16, 96, 48, 128, 32), (9, 40, 24, 32, 0), (7, 30, 16, 16, 8)]


def run_kernel(inp, device, kv_int64: bool | None = None, **kwargs) -> torch.Tensor:
    """The public op, or its testing entry point where `kv_int64` forces the row addressing."""
    out = poisoned_out(inp.q.shape[0], inp.q.shape[1], inp.d_v, device)
    if kv_int64 is None:
        result = sparse_mla_prefill(inp.q, inp.kv, inp.indices, inp.sm_scale, inp.d_v, out=out, **kwargs)
    else:
        result = prefill_forced(inp.q, inp.kv, inp.indices, inp.sm_scale, inp.d_v, out=out, kv_int64=kv_int64,
                                **kwargs)
    assert result is out
    return out


def reference(inp, **kwargs) -> torch.Tensor:
    return sparse_mla_reference(inp.q, inp.kv, inp.indices, inp.sm_scale, inp.d_v, **kwargs)


@pytest.mark.parametrize("shape", BASE_SHAPES, ids=lambda s: "T{}-S{}-k{}-dv{}-tail{}".format(*s))
@pytest.mark.parametrize("heads", [1, 4, 8, 16, 32])
def test_matches_fp64_reference(device, shape, heads):
    T, S, topk, d_v, d_tail = shape
    inp = random_inputs(T, heads, S, topk, d_v, d_tail, seed=heads * 100 + T, device=device)
    assert_close_to_reference(run_kernel(inp, device), reference(inp))


@pytest.mark.parametrize("heads", [64, 128])
def test_many_heads_tiled_over_grid(device, heads):
    inp = random_inputs(5, heads, 64, 32, 32, 16, seed=heads, device=device)
    assert_close_to_reference(run_kernel(inp, device), reference(inp))


def test_ragged_padding_and_topk_length(device):
    T, H, S, topk = 41, 8, 200, 96
    inp = random_inputs(T, H, S, topk, 64, 16, seed=7, device=device, empty_fraction=0.65)
    empty_share = (inp.indices < 0).float().mean().item()
    assert empty_share >= 0.6
    g = torch.Generator().manual_seed(8)
    topk_length = torch.randint(0, topk + 1, (T,), generator=g, dtype=torch.int32)
    topk_length[:3] = torch.tensor([0, topk, topk // 3], dtype=torch.int32)
    topk_length = topk_length.to(device)
    out = run_kernel(inp, device, topk_length=topk_length)
    assert_close_to_reference(out, reference(inp, topk_length=topk_length))
    # topk_length really cuts: slots past it must not contribute.
    without_cut = reference(inp)
    assert not torch.allclose(out.double(), without_cut, atol=1e-2)


def test_out_of_range_indices_are_empty_slots(device):
    T, H, S, topk = 23, 8, 120, 64
    inp = random_inputs(T, H, S, topk, 64, 16, seed=11, device=device)
    g = torch.Generator().manual_seed(12)
    bad = torch.rand((T, topk), generator=g) < 0.3
    junk = torch.randint(S, 2**31 - 1, (T, topk), generator=g, dtype=torch.int32)
    junk[::2] = torch.randint(-2**31, -1, junk[::2].shape, generator=g, dtype=torch.int32)
    dirty = torch.where(bad.to(device), junk.to(device), inp.indices)
    clean = torch.where(bad.to(device), torch.full_like(inp.indices, -1), inp.indices)
    out_dirty = sparse_mla_prefill(inp.q, inp.kv, dirty, inp.sm_scale, inp.d_v)
    out_clean = sparse_mla_prefill(inp.q, inp.kv, clean, inp.sm_scale, inp.d_v)
    assert torch.equal(out_dirty, out_clean)
    ref = sparse_mla_reference(inp.q, inp.kv, clean, inp.sm_scale, inp.d_v)
    assert_close_to_reference(out_dirty, ref)


def test_rows_without_valid_slot_are_exact_zeros(device):
    T, H, S, topk = 12, 8, 50, 32
    inp = random_inputs(T, H, S, topk, 64, 16, seed=13, device=device)
    indices = inp.indices.clone()
    indices[0] = -1
    indices[3] = S + 5
    indices[5, :] = -7
    topk_length = torch.full((T,), topk, dtype=torch.int32, device=device)
    topk_length[7] = 0
    out = poisoned_out(T, H, inp.d_v, device)
    sparse_mla_prefill(inp.q, inp.kv, indices, inp.sm_scale, inp.d_v, topk_length=topk_length, out=out)
    for t in (0, 3, 5, 7):
        assert torch.equal(out[t], torch.zeros_like(out[t])), f"token {t} not exact zeros"
    assert torch.isfinite(out).all()
    ref = sparse_mla_reference(inp.q, inp.kv, indices, inp.sm_scale, inp.d_v, topk_length=topk_length)
    assert_close_to_reference(out, ref)


def test_kv_and_index_layouts(device):
    inp = random_inputs(10, 8, 64, 32, 64, 16, seed=17, device=device)
    flat = sparse_mla_prefill(inp.q, inp.kv, inp.indices, inp.sm_scale, inp.d_v)
    nested = sparse_mla_prefill(inp.q, inp.kv[:, None, :], inp.indices[:, None, :], inp.sm_scale, inp.d_v)
    assert torch.equal(flat, nested)
    # Strided (non-contiguous) views compute the same values.
    wide = torch.randn(64, 2, 80, device=device).to(torch.bfloat16)
    wide[:, 1] = inp.kv
    strided = sparse_mla_prefill(inp.q, wide[:, 1], inp.indices, inp.sm_scale, inp.d_v)
    assert torch.equal(flat, strided)


def test_int32_and_int64_addressing_bitwise_equal(device):
    inp = random_inputs(19, 8, 100, 48, 64, 16, seed=19, device=device, empty_fraction=0.2)
    narrow = run_kernel(inp, device, kv_int64=False)
    wide = run_kernel(inp, device, kv_int64=True)
    assert torch.equal(narrow, wide)


def test_two_runs_bitwise_equal(device):
    inp = random_inputs(21, 16, 90, 40, 64, 16, seed=23, device=device, empty_fraction=0.3)
    assert torch.equal(run_kernel(inp, device), run_kernel(inp, device))


def test_empty_batch_and_empty_topk(device):
    inp = random_inputs(0, 8, 10, 4, 64, 16, device=device)
    out = sparse_mla_prefill(inp.q, inp.kv, inp.indices, inp.sm_scale, inp.d_v)
    assert out.shape == (0, 8, 64)
    q, kv = random_qkv(4, 8, 10, 64, 16, torch.Generator().manual_seed(1), device)
    no_slots = torch.empty((4, 0), dtype=torch.int32, device=device)
    out = sparse_mla_prefill(q, kv, no_slots, 0.1, 64, out=poisoned_out(4, 8, 64, device))
    assert torch.equal(out, torch.zeros_like(out))


# ---- real shapes on the GPU -------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("heads", [8, 16, 32, 64, 128])
def test_gpu_real_shape_matches_fp64(heads):
    seq, topk = 4096, 2048
    device = torch.device("cuda")
    indices = drifting_indices([seq], topk, 0.10, seed=heads).to(device)
    q, kv = random_qkv(seq, heads, seq, 512, 64, torch.Generator().manual_seed(heads), device)
    out = poisoned_out(seq, heads, 512, device)
    sparse_mla_prefill(q, kv, indices, 576 ** -0.5, 512, out=out)
    ref = sparse_mla_reference(q, kv, indices, 576 ** -0.5, 512)
    assert_close_to_reference(out, ref)


@pytest.mark.gpu
def test_gpu_int64_addressing_over_2_31_elements():
    """S * d_qk >= 2**31 picks int64 row offsets; rows past the int32 range are read right."""
    device = torch.device("cuda")
    num_kv_rows = 2**31 // 576 + 4096
    kv = torch.empty((num_kv_rows, 576), dtype=torch.bfloat16, device=device)
    g = torch.Generator(device=device).manual_seed(3)
    tail_rows = torch.arange(num_kv_rows - 4096, num_kv_rows, device=device)
    kv[tail_rows] = torch.randn((4096, 576), generator=g, device=device).to(torch.bfloat16)
    q = torch.randn((64, 8, 576), generator=g, device=device).to(torch.bfloat16)
    pick = torch.randint(0, 4096, (64, 256), generator=g, device=device)
    indices = (num_kv_rows - 4096 + pick).to(torch.int32)
    indices = torch.sort(indices, dim=1).values
    dup = indices[:, 1:] == indices[:, :-1]
    indices[:, 1:][dup] = -1
    out = poisoned_out(64, 8, 512, device)
    sparse_mla_prefill(q, kv, indices, 576 ** -0.5, 512, out=out)
    ref = sparse_mla_reference(q, kv, indices, 576 ** -0.5, 512)
    assert_close_to_reference(out, ref)


@pytest.mark.parametrize("end_block", [16, 1024])
def test_kernel_found_loop_bound_equals_the_host_one(device, monkeypatch, end_block):
    """Without topk_length the kernel finds each token's loop bound itself (one past the last
    slot holding a row in [0, S)). Rows whose last valid slot is the first, the last, one before
    a run of -1 or of out-of-range rows, or none at all: bitwise the same as passing the host's
    effective_lengths, and close to fp64. 16-slot steps make the search span several steps."""
    from glmcheck.kernels import prefill

    monkeypatch.setattr(prefill, "END_BLOCK", end_block)
    tokens, topk, kv_rows = 6, 40, 64
    g = torch.Generator().manual_seed(9)
    indices = torch.randperm(kv_rows, generator=g)[:topk].repeat(tokens, 1).to(torch.int32)
    indices[0, 1:] = -1                      # only slot 0 valid
    indices[1, 17] = -1                      # a hole; the last slot stays valid
    indices[2, 25:] = -1                     # ends at slot 24
    indices[3, 30:] = kv_rows + 5            # out-of-range tail
    indices[4, :] = -1                       # no valid slot
    indices[5, 39] = kv_rows                 # last slot just out of range
    q, kv = random_qkv(tokens, 8, kv_rows, 64, 16, g, device)
    indices = indices.to(device)
    found = sparse_mla_prefill(q, kv, indices, 80 ** -0.5, 64, out=poisoned_out(tokens, 8, 64, device))
    lengths = prefill.effective_lengths(indices, None, kv_rows)
    assert lengths.tolist() == [1, 40, 25, 30, 0, 39]
    given = sparse_mla_prefill(q, kv, indices, 80 ** -0.5, 64, topk_length=lengths)
    assert torch.equal(found, given)
    monkeypatch.setattr(prefill, "KERNEL_BOUND_MAX_ROWS", 0)  # no tile finds its bound: the host's lengths
    assert torch.equal(found, sparse_mla_prefill(q, kv, indices, 80 ** -0.5, 64))
    assert_close_to_reference(found, sparse_mla_reference(q, kv, indices, 80 ** -0.5, 64))


@pytest.mark.parametrize("heads, with_length, kernel_bound",
                         [(8, False, True), (16, False, True), (32, False, False), (8, True, True),
                          (32, True, False)])
def test_loop_bound_source_by_tile(device, monkeypatch, heads, with_length, kernel_bound):
    """The Triton per-token kernel finds its own loop bound on 16-row tiles, within topk_length
    when one is given (handed the lengths alone it ran 5 % slower); the 32-row tile, which spills
    with the search, is handed topk_length or the host's lengths. Every form gives
    the fp64 reference's answer."""
    from glmcheck.kernels import prefill

    handed = []
    launch = prefill.launch_per_token
    monkeypatch.setattr(prefill, "launch_per_token", lambda args, lengths, out, tile, wide, find:
                        handed.append((lengths, find)) or launch(args, lengths, out, tile, wide, find))
    monkeypatch.setattr(prefill, "PINGPONG_MIN_HEADS", 129)  # the Triton tile at every head count
    inp = random_inputs(5, heads, 48, 24, 32, 16, seed=3, device=device, empty_fraction=0.2)
    length = torch.full((5,), 20, dtype=torch.int32, device=device) if with_length else None
    out = run_kernel(inp, device, topk_length=length)
    assert handed and all(find == kernel_bound for _, find in handed)
    for lengths, _ in handed:
        if with_length:
            assert torch.equal(lengths, length)
        else:
            assert (lengths is None) == kernel_bound
    assert_close_to_reference(out, reference(inp, topk_length=length))
    if with_length and kernel_bound:  # the bound found within topk_length changes no bit
        monkeypatch.setattr(prefill, "KERNEL_BOUND_MAX_ROWS", 0)  # handed the lengths alone
        assert torch.equal(out, run_kernel(inp, device, topk_length=length))
