"""The per-token kernel over the FP8 pool itself (issue 57, item 5: `sparse_mla_prefill_fp8`) against the fp64
reference on the dequantised rows (poisoned outputs, fresh random inputs), and against the bf16 per-token kernel on
those rows: the same bf16 values enter the same MMAs, so with the same tile the output is the bf16 kernel's bit for
bit (asserted in both worlds; the bf16 kernel is forced to the FP8 kernel's tile, which in the interpreter is the
tile both use anyway). Empty and out-of-range slots, rows past num_rows (present in the pool, never read),
topk_length, strided pools, bad arguments."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.data.indices import drifting_indices
from glmcheck.data.inputs import poisoned_out, random_inputs, random_qkv
from glmcheck.kernels.fp8 import dequantize_kv_pool, quantize_kv_pool
from glmcheck.kernels.prefill import prefill_forced
from glmcheck.kernels.prefill_fp8 import fp8_tile, sparse_mla_prefill_fp8
from tests.support.checks import assert_close_to_reference


def fp8_inputs(T: int, H: int, S: int, topk: int, d_v: int, d_tail: int, seed: int, device, pow2: bool = True,
               empty_fraction: float = 0.0):
    """(inputs whose kv is the pool's dequantised rows, the pool); the pool's rows past S hold NaN bytes."""
    inp = random_inputs(T, H, S, topk, d_v, d_tail, seed=seed, device=device, empty_fraction=empty_fraction)
    g = torch.Generator().manual_seed(seed)
    # Each (row, 128-column tile) its own magnitude, 2^-3 .. 2^3: a row's scales differ from tile to tile.
    tiles = -(-d_v // 128)
    factor = torch.exp2(torch.rand((S, tiles), generator=g) * 6 - 3).repeat_interleave(128, dim=1)[:, :d_v]
    raw = inp.kv.float().cpu()
    raw[:, :d_v] *= factor
    pool = quantize_kv_pool(raw.bfloat16().to(device), d_rope=d_tail, pow2_scales=pow2)
    pool.reshape(-1, pool.shape[-1])[S:] = 0xFF  # NaN codes, scales and rope past the rows that exist
    return replace(inp, kv=dequantize_kv_pool(pool, S, d_rope=d_tail)), pool


def run_fp8(inp, pool, **kwargs) -> torch.Tensor:
    out = poisoned_out(inp.q.shape[0], inp.q.shape[1], inp.d_v, inp.q.device)
    result = sparse_mla_prefill_fp8(inp.q, pool, inp.kv.shape[0], inp.indices, inp.sm_scale, inp.d_v, out=out,
                                    **kwargs)
    assert result is out
    return out


def assert_fp64_bound_and_bf16_bits(out: torch.Tensor, inp, **kwargs) -> None:
    """Within the per-token kernel's fp64 bound, and the bf16 per-token kernel's bits with the same tile."""
    assert_close_to_reference(out, sparse_mla_reference(inp.q, inp.kv, inp.indices, inp.sm_scale, inp.d_v,
                                                        **kwargs))
    bf16 = prefill_forced(inp.q, inp.kv, inp.indices, inp.sm_scale, inp.d_v, tile=fp8_tile(inp.q.device), **kwargs)
    differ = out.view(torch.int16) != bf16.view(torch.int16)
    assert not bool(differ.any()), f"{int(differ.sum())} outputs differ from the bf16 kernel's"


# (T, S, topk, d_v, d_tail, pow2): one partial scale tile, the real layout, two tiles with non-pow2 scales.
SHAPES = [(9, 100, 32, 64, 16, True), (5, 130, 48, 512, 64, True), (6, 70, 24, 256, 32, False)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "T{}-S{}-k{}-dv{}-tail{}-pow2{}".format(*s))
@pytest.mark.parametrize("heads", [1, 8, 16, 64])
def test_matches_fp64_and_the_bf16_kernels_bits(device, shape, heads):
    T, S, topk, d_v, d_tail, pow2 = shape
    inp, pool = fp8_inputs(T, heads, S, topk, d_v, d_tail, seed=heads * 10 + T, device=device, pow2=pow2)
    assert_fp64_bound_and_bf16_bits(run_fp8(inp, pool), inp)


def test_empty_slots_rows_past_num_rows_and_topk_length(device):
    T, H, S, topk = 17, 8, 150, 64
    inp, pool = fp8_inputs(T, H, S, topk, 512, 64, seed=3, device=device, empty_fraction=0.4)
    g = torch.Generator().manual_seed(4)
    bad = torch.rand((T, topk), generator=g) < 0.3
    junk = torch.randint(S, 2**31 - 1, (T, topk), generator=g, dtype=torch.int32)
    junk[::3] = torch.randint(S, pool.shape[0] * 64, junk[::3].shape, generator=g, dtype=torch.int32)  # in the pool
    junk[1::3] = torch.randint(-2**31, -1, junk[1::3].shape, generator=g, dtype=torch.int32)
    dirty = torch.where(bad.to(device), junk.to(device), inp.indices)
    clean = replace(inp, indices=torch.where(bad.to(device), torch.full_like(inp.indices, -1), inp.indices))
    out = run_fp8(replace(inp, indices=dirty), pool)
    assert torch.equal(out, run_fp8(clean, pool)), "a slot outside [0, num_rows) is an empty slot"
    assert_fp64_bound_and_bf16_bits(out, clean)
    topk_length = torch.randint(0, topk + 1, (T,), generator=g, dtype=torch.int32)
    topk_length[:3] = torch.tensor([0, topk, topk // 3], dtype=torch.int32)
    topk_length = topk_length.to(device)
    cut = run_fp8(clean, pool, topk_length=topk_length)
    assert_fp64_bound_and_bf16_bits(cut, clean, topk_length=topk_length)
    assert not torch.allclose(cut.double(), out.double(), atol=1e-2), "topk_length cuts"


def test_tokens_without_a_valid_slot_are_exact_zeros(device):
    T, H, S, topk = 10, 16, 80, 32
    inp, pool = fp8_inputs(T, H, S, topk, 64, 16, seed=5, device=device)
    indices = inp.indices.clone()
    indices[0] = -1
    indices[3] = S  # the first row past num_rows: in the pool (NaN bytes), never read
    topk_length = torch.full((T,), topk, dtype=torch.int32, device=device)
    topk_length[7] = 0
    out = run_fp8(replace(inp, indices=indices), pool, topk_length=topk_length)
    for t in (0, 3, 7):
        assert torch.equal(out[t], torch.zeros_like(out[t])), f"token {t} not exact zeros"
    assert_fp64_bound_and_bf16_bits(out, replace(inp, indices=indices), topk_length=topk_length)


def test_strided_pools_and_views_give_the_same_bits(device):
    inp, pool = fp8_inputs(8, 8, 100, 32, 512, 64, seed=7, device=device)
    flat = run_fp8(inp, pool)
    wide = torch.zeros((pool.shape[0] * 2, 64, 1, 700), dtype=torch.uint8, device=device)
    wide[::2, :, :, 30:686] = pool
    assert torch.equal(run_fp8(inp, wide[::2, :, :, 30:686]), flat), "pages strided, rows offset"
    nested = sparse_mla_prefill_fp8(inp.q, pool, 100, inp.indices[:, None, :], inp.sm_scale, 512)
    assert torch.equal(nested, flat)
    q_wide = torch.zeros((8, 8, 600), dtype=torch.bfloat16, device=device)
    q_wide[:, :, :576] = inp.q
    assert torch.equal(run_fp8(replace(inp, q=q_wide[:, :, :576]), pool), flat)


def test_empty_batch_and_empty_topk(device):
    inp, pool = fp8_inputs(0, 8, 10, 4, 64, 16, seed=1, device=device)
    assert run_fp8(inp, pool).shape == (0, 8, 64)
    q, _ = random_qkv(4, 8, 10, 64, 16, torch.Generator().manual_seed(1), device)
    no_slots = torch.empty((4, 0), dtype=torch.int32, device=device)
    out = sparse_mla_prefill_fp8(q, pool, 10, no_slots, 0.1, 64, out=poisoned_out(4, 8, 64, device))
    assert torch.equal(out, torch.zeros_like(out))
    no_rows = sparse_mla_prefill_fp8(q, pool, 0, torch.zeros((4, 3), dtype=torch.int32, device=device), 0.1, 64)
    assert torch.equal(no_rows, torch.zeros_like(no_rows)), "num_rows 0: every slot empty"


def test_bad_arguments_name_themselves(device, monkeypatch):
    inp, pool = fp8_inputs(2, 8, 40, 8, 512, 64, seed=2, device=device)
    q, idx, scale = inp.q, inp.indices, inp.sm_scale

    def call(*args, **kwargs):
        return sparse_mla_prefill_fp8(*args, **kwargs)

    with pytest.raises(TypeError, match="q must be torch.bfloat16"):
        call(q.float(), pool, 40, idx, scale)
    with pytest.raises(ValueError, match=r"q must have shape \[T, H, d_qk\]"):
        call(q[0], pool, 40, idx, scale)
    with pytest.raises(ValueError, match=r"pool must be a uint8 tensor \[pages, block, 1, bytes\]"):
        call(q, pool.view(torch.int8), 40, idx, scale)
    with pytest.raises(ValueError, match="pool must be a uint8 tensor"):
        call(q, dequantize_kv_pool(pool, 40), 40, idx, scale)
    for rows in (65, -1, 40.0, True):
        with pytest.raises(ValueError, match=r"num_rows must be an int in \[0, 64\]"):
            call(q, pool, rows, idx, scale)
    small = quantize_kv_pool(torch.zeros(4, 80, dtype=torch.bfloat16, device=device), d_rope=16)
    with pytest.raises(ValueError, match="pool rows of 100 bytes hold no latent"):
        call(q, small, 4, idx, scale)
    with pytest.raises(ValueError, match=r"hold 572 latent values beside 32 rope values \(d_qk - d_v\), not d_v = 256"):
        call(q[:, :, :288].contiguous(), pool, 40, idx, scale, 256)
    with pytest.raises(ValueError, match="d_v must be a power of two"):
        call(q, pool, 40, idx, scale, 500)
    with pytest.raises(TypeError, match="indices must be torch.int32"):
        call(q, pool, 40, idx.long(), scale)
    with pytest.raises(ValueError, match=r"topk_length must have shape \[2\]"):
        call(q, pool, 40, idx, scale, topk_length=torch.zeros(3, dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="sm_scale must be a positive finite float"):
        call(q, pool, 40, idx, -1.0)
    with pytest.raises(ValueError, match=r"out must have shape \[2, 8, 512\]"):
        call(q, pool, 40, idx, scale, out=poisoned_out(2, 8, 256, device))
    shared = pool.reshape(-1)[:2 * 8 * 512 * 2].view(torch.bfloat16).view(2, 8, 512)
    with pytest.raises(ValueError, match="out must not share storage with pool"):
        call(q, pool, 40, idx, scale, out=shared)
    with pytest.raises(ValueError, match="out must not overlap q"):
        call(q, pool, 40, idx, scale, out=q[:, :, :512])
    if device.type == "cpu":
        with pytest.raises(ValueError, match="pool must be on cpu"):
            call(q, torch.empty(1, 64, 1, 656, dtype=torch.uint8, device="meta"), 40, idx, scale)
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        with pytest.raises(ValueError, match="q must be on a CUDA device"):
            call(q, pool, 40, idx, scale)


# ---- real shapes on the GPU -------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("heads", [8, 16, 64, 128])
def test_gpu_real_shape_matches_fp64_and_the_bf16_kernels_bits(heads):
    seq, topk = 4096, 2048
    device = torch.device("cuda")
    indices = drifting_indices([seq], topk, 0.10, seed=heads).to(device)
    q, raw = random_qkv(seq, heads, seq, 512, 64, torch.Generator().manual_seed(heads), device)
    pool = quantize_kv_pool(raw)
    kv = dequantize_kv_pool(pool, seq)
    lengths = torch.full((seq,), topk, dtype=torch.int32, device=device)
    for topk_length in (None, lengths):
        out = poisoned_out(seq, heads, 512, device)
        sparse_mla_prefill_fp8(q, pool, seq, indices, 576 ** -0.5, 512, topk_length=topk_length, out=out)
        inp = replace(random_inputs(1, 1, 1, 1), q=q, kv=kv, indices=indices, sm_scale=576 ** -0.5, d_v=512)
        assert_fp64_bound_and_bf16_bits(out, inp, topk_length=topk_length)
