"""The FP8 pool's one-launch dequantiser (issue 57, item 5): `dequantize_kv_pool_fused` gives the torch form's
bits (`dequantize_kv_pool`) on every input: quantised rows and random bytes (NaN / Inf codes, scales and rope
values), every e4m3 code, partial pages and tiles, strided pools and outputs, poisoned outputs; bad arguments name
themselves. On the GPU (-m gpu) the same tests run against torch's CUDA forms."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from glmcheck.kernels.fp8 import dequantize_kv_pool, latent_width, pool_bytes, quantize_kv_pool
from glmcheck.kernels.fp8_dequant import (
    bf16_bits,
    decode_e4m3,
    dequantize_kv_pool_fused,
    native_e4m3,
    torch_cpu_nan_bits,
)

# Random scales overflow and meet Inf in the interpreter's numpy multiply, as they do in torch's: its warnings.
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in multiply:RuntimeWarning")


@triton.jit
def _decode_codes(src, dst, NATIVE: tl.constexpr):
    offs = tl.arange(0, 256)
    tl.store(dst + offs, decode_e4m3(tl.load(src + offs), NATIVE))


@triton.jit
def _round_values(src, dst, n, NATIVE: tl.constexpr, NAN_BITS: tl.constexpr):
    offs = tl.arange(0, 64)
    tl.store(dst + offs, bf16_bits(tl.load(src + offs, mask=offs < n), NATIVE, NAN_BITS), mask=offs < n)


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int16)



def _assert_same_bits(pool: torch.Tensor, num_rows: int, d_rope: int = 64, **kwargs) -> torch.Tensor:
    expected = dequantize_kv_pool(pool, num_rows, d_rope=d_rope)
    got = dequantize_kv_pool_fused(pool, num_rows, d_rope=d_rope, **kwargs)
    assert got.shape == expected.shape and got.dtype == torch.bfloat16
    differ = _bits(got) != _bits(expected)
    assert not bool(differ.any()), f"{int(differ.sum())} values differ, first at {differ.nonzero()[0].tolist()}"
    return got


def _random_bytes(pages: int, width: int, seed: int, device) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (pages, 64, 1, width), generator=g, dtype=torch.uint8).to(device)


def _decode_modes(device) -> list[bool]:
    return [False, True] if native_e4m3(device) else [False]


def test_every_e4m3_code_decodes_exactly(device):
    codes = torch.arange(256, dtype=torch.uint8, device=device)
    expected = codes.view(torch.float8_e4m3fn).float()
    for native in _decode_modes(device):
        got = torch.empty(256, dtype=torch.float32, device=device)
        _decode_codes[(1,)](codes, got, NATIVE=native)
        nan = expected.isnan()
        assert torch.equal(got.isnan(), nan) and nan.sum() == 2, native
        assert torch.equal(got[~nan].view(torch.int32), expected[~nan].view(torch.int32)), native  # -0.0 too


def test_rounding_to_bf16_is_torchs(device):
    words = [0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7FFFFF, 0x7F7F7FFF, 0x00008000, 0x00018000, 0x80000001,
             0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x80000000, 0x00000000]
    g = torch.Generator().manual_seed(5)
    words += torch.randint(0, 2**32, (64 - len(words),), generator=g, dtype=torch.int64).tolist()
    values = torch.tensor(words, dtype=torch.int64).to(torch.int32).view(torch.float32).to(device)
    native = device.type == "cuda"
    got = torch.empty(64, dtype=torch.int16, device=device)
    _round_values[(1,)](values, got, 64, NATIVE=native, NAN_BITS=0 if native else torch_cpu_nan_bits())
    assert torch.equal(got, _bits(values.to(torch.bfloat16))), (got != _bits(values.to(torch.bfloat16))).nonzero()


def test_every_code_and_scale_through_the_pool(device):
    """Each row holds all 256 codes twice, its 4 tiles' scales among pow2, non-pow2, subnormal, huge, 0, negative,
    NaN and Inf (products overflowing to Inf, 0 x Inf = NaN); the rope bits random (NaN payloads too)."""
    scales = torch.tensor([1.0, 2.0**-9, 0.37, 3.1e-3, 1e-40, 3e38, 0.0, -2.5, float("nan"), float("inf"),
                           -float("inf"), 7.0e-46], dtype=torch.float32)
    rows = 16
    pool = _random_bytes(1, 656, 3, "cpu").reshape(64, 656)
    pool[:rows, :512] = torch.arange(256, dtype=torch.uint8).repeat(2)
    pick = torch.arange(rows * 4).remainder(len(scales)).reshape(rows, 4)
    pool[:rows, 512:528] = scales[pick].view(torch.uint8).reshape(rows, 16)
    _assert_same_bits(pool.reshape(1, 64, 1, 656).to(device), rows)


@pytest.mark.parametrize("num_rows", [0, 1, 37, 64, 65, 200])
def test_random_bytes_give_the_torch_forms_bits(device, num_rows):
    """Random bytes: NaN / Inf / subnormal scales and codes, NaN rope payloads; rows past num_rows are not output."""
    pool = _random_bytes(max(4, -(-num_rows // 64)), 656, num_rows, device)
    out = _assert_same_bits(pool, num_rows)
    assert out.shape == (num_rows, 576)


@pytest.mark.parametrize("pow2", [True, False])
@pytest.mark.parametrize("d_qk, d_rope", [(576, 64), (80, 16), (216, 16), (160, 0)])
def test_quantised_rows_give_the_torch_forms_bits(device, pow2, d_qk, d_rope):
    """Quantised N(0, 1) rows over a wide range of scales; latent narrower than a tile (64), a partial second
    tile (200), no rope."""
    g = torch.Generator().manual_seed(d_qk + pow2)
    rows = torch.randn(150, d_qk, generator=g) * torch.logspace(-6, 4, 150)[:, None]
    pool = quantize_kv_pool(rows.bfloat16().to(device), d_rope=d_rope, pow2_scales=pow2)
    assert pool.shape == (3, 64, 1, pool_bytes(d_qk, d_rope))
    back = _assert_same_bits(pool, 150, d_rope=d_rope)
    assert torch.isfinite(back).all()


@pytest.mark.parametrize("width, d_rope", [(32 + 4 + 32, 16), (200 + 8 + 0, 0), (64, 32)])
def test_other_layouts_of_random_bytes(device, width, d_rope):
    """Latent narrower than a tile, a partial second tile without rope, rope alone (no latent, no scale)."""
    _assert_same_bits(_random_bytes(2, width, width, device), 99, d_rope=d_rope)


def test_poisoned_and_strided_outputs_are_written_whole(device):
    pool = _random_bytes(2, 656, 9, device)
    out = torch.full((100, 576), float("nan"), dtype=torch.bfloat16, device=device)
    assert _assert_same_bits(pool, 100, out=out) is out
    wide = torch.full((100, 700), float("nan"), dtype=torch.bfloat16, device=device)
    _assert_same_bits(pool, 100, out=wide[:, 50:626])
    assert torch.isnan(wide[:, :50]).all() and torch.isnan(wide[:, 626:]).all(), "only out's columns written"
    transposed = torch.full((576, 100), float("nan"), dtype=torch.bfloat16, device=device).t()
    _assert_same_bits(pool, 100, out=transposed)


def test_strided_pools_are_read_where_they_lie(device):
    wide = _random_bytes(6, 1400, 11, device)
    _assert_same_bits(wide[::2, :, :, 100:756], 150)  # pages and rows strided
    _assert_same_bits(wide[:3, :, :, 1:1313:2], 130)  # every other byte: the bytes assembled one by one


def test_rows_past_num_rows_change_nothing(device):
    pool = _random_bytes(2, 656, 13, device)
    first = dequantize_kv_pool_fused(pool, 70)
    pool.reshape(128, 656)[70:] = 0xFF  # NaN codes and scales past the rows read
    assert torch.equal(_bits(dequantize_kv_pool_fused(pool, 70)), _bits(first))


def test_bad_arguments_name_themselves(device, monkeypatch):
    pool = quantize_kv_pool(torch.zeros(4, 576, dtype=torch.bfloat16, device=device))
    with pytest.raises(ValueError, match=r"pool must be a uint8 tensor \[pages, block, 1, bytes\]"):
        dequantize_kv_pool_fused(pool.view(torch.int8), 4)
    with pytest.raises(ValueError, match="pool must be a uint8 tensor"):
        dequantize_kv_pool_fused(pool[:, :, 0], 4)
    with pytest.raises(ValueError, match="pool must be a uint8 tensor"):
        dequantize_kv_pool_fused("pool", 4)
    for rows in (65, -1, 2.0, True):
        with pytest.raises(ValueError, match=r"num_rows must be an int in \[0, 64\]"):
            dequantize_kv_pool_fused(pool, rows)
    for rope in (-1, 1.5, False):
        with pytest.raises(ValueError, match="d_rope must be an int >= 0"):
            dequantize_kv_pool_fused(pool, 4, d_rope=rope)
    with pytest.raises(ValueError, match="hold no latent"):
        dequantize_kv_pool_fused(pool, 4, d_rope=63)
    with pytest.raises(TypeError, match=r"out must be a torch\.Tensor"):
        dequantize_kv_pool_fused(pool, 4, out=[0])
    with pytest.raises(TypeError, match=r"out must be torch\.bfloat16"):
        dequantize_kv_pool_fused(pool, 4, out=torch.empty(4, 576, device=device))
    with pytest.raises(ValueError, match=r"out must have shape \[4, 576\]"):
        dequantize_kv_pool_fused(pool, 4, out=torch.empty(5, 576, dtype=torch.bfloat16, device=device))
    with pytest.raises(ValueError, match="out must not share storage with pool"):
        dequantize_kv_pool_fused(pool, 4, out=pool.reshape(-1)[:4 * 576 * 2].view(torch.bfloat16).view(4, 576))
    if device.type == "cpu":
        with pytest.raises(ValueError, match="out must be on cpu"):
            dequantize_kv_pool_fused(pool, 4, out=torch.empty(4, 576, dtype=torch.bfloat16, device="meta"))
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        with pytest.raises(ValueError, match="pool must be on a CUDA device"):
            dequantize_kv_pool_fused(pool, 4)


@pytest.mark.gpu
def test_gpu_bench_sized_pools_give_the_torch_forms_bits():
    """The bench's pools on the GPU (8192 and 16384 rows, quantised and random bytes), against torch's CUDA form."""
    device = torch.device("cuda")
    g = torch.Generator().manual_seed(17)
    for rows in (8192, 16384 - 5):
        kv = torch.randn(rows, 576, generator=g).bfloat16().to(device)
        _assert_same_bits(quantize_kv_pool(kv), rows)
        _assert_same_bits(_random_bytes(-(-rows // 64), 656, rows, device), rows)


def test_the_latent_width_is_the_one_the_layout_allows():
    """`latent_width` (what `check_pool` reads a row's layout by) against a search over every latent."""
    for width in range(0, 1400, 7):
        for d_rope in (0, 16, 64):
            found = [n for n in range(width + 1) if n + 4 * -(-n // 128) + 2 * d_rope == width]
            assert latent_width(width, d_rope) == (found[0] if found else None) and len(found) <= 1
