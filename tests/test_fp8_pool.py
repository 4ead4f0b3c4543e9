"""The FP8 KV pool (issue 57, item 1): `quantize_kv_pool` writes DeepSeek-V3.2's FP8 sparse layout byte for byte as
an independent implementation here packs it (e4m3 codes found by searching all 256, fp32 scales and bf16 rope
bits packed with `struct`), and `dequantize_kv_pool` gives bf16(code x scale) with the rope unchanged."""

from __future__ import annotations

import math
import struct

import pytest
import torch

from glmcheck.kernels.fp8 import dequantize_kv_pool, pool_bytes, quantize_kv_pool


def _e4m3_values() -> list[float]:
    """The value of each e4m3fn code 0..255 (NaN for the two NaN codes): sign, 4 exponent bits (bias 7), 3 mantissa."""
    out = []
    for code in range(256):
        sign, exponent, mantissa = (-1.0 if code & 0x80 else 1.0), (code >> 3) & 0xF, code & 0x7
        if exponent == 0xF and mantissa == 0x7:
            out.append(math.nan)
        elif exponent == 0:
            out.append(sign * mantissa / 8 * 2.0 ** -6)
        else:
            out.append(sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    return out


E4M3 = _e4m3_values()


def _encode(x: float) -> int:
    """The e4m3fn code nearest x (ties to the even code, i.e. the even mantissa), by search."""
    best = min((abs(v - x), code & 1, code) for code, v in enumerate(E4M3) if not math.isnan(v)
               and (v != 0 or code == (0x80 if math.copysign(1, x) < 0 else 0)))
    return best[2]


def _pack(rows: torch.Tensor, d_rope: int, pow2: bool) -> bytes:
    latent = rows.shape[1] - d_rope
    out = bytearray()
    for row in rows.float().tolist():
        codes, scales = [], []
        for start in range(0, latent, 128):
            part = row[start:min(start + 128, latent)]
            scale = max(max(abs(v) for v in part) / 448.0, 1e-4)
            if pow2:
                scale = 2.0 ** math.ceil(math.log2(scale))
            scale = struct.unpack("<f", struct.pack("<f", scale))[0]  # as fp32 holds it
            scales.append(scale)
            codes += [_encode(struct.unpack("<f", struct.pack("<f", v / scale))[0]) for v in part]
        out += bytes(codes) + b"".join(struct.pack("<f", s) for s in scales)
        out += b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:] for v in row[latent:])
    return bytes(out)


def _rows(count: int, d_qk: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(count, d_qk, generator=g) * torch.logspace(-3, 2, count)[:, None]
    rows[0, :128] = 0  # a zero tile: the scale floor
    rows[1, 5] = 3000.0  # one large value sets its tile's scale
    rows[2, :] = 1e-6  # below the floor
    return rows.bfloat16()


@pytest.mark.parametrize("pow2", [True, False])
@pytest.mark.parametrize("d_qk, d_rope", [(576, 64), (80, 16)])
def test_the_pool_is_the_layout_byte_for_byte(pow2, d_qk, d_rope):
    rows = _rows(70, d_qk, 3)
    pool = quantize_kv_pool(rows, d_rope=d_rope, pow2_scales=pow2)
    width = pool_bytes(d_qk, d_rope)
    assert pool.shape == (2, 64, 1, width) and pool.dtype == torch.uint8
    assert width == (656 if d_qk == 576 else 64 + 4 + 32)
    flat = pool.reshape(-1, width)
    assert bytes(flat[:70].flatten().tolist()) == _pack(rows, d_rope, pow2)
    assert not flat[70:, : d_qk - d_rope].any() and not flat[70:, -2 * d_rope:].any(), "the last page's padding"


@pytest.mark.parametrize("pow2", [True, False])
@pytest.mark.parametrize("d_qk, d_rope", [(576, 64), (80, 16)])
def test_dequantising_gives_code_times_scale_and_the_rope_bits(pow2, d_qk, d_rope):
    rows = _rows(100, d_qk, 4)
    latent = d_qk - d_rope
    tiles = -(-latent // 128)
    pool = quantize_kv_pool(rows, d_rope=d_rope, pow2_scales=pow2)
    back = dequantize_kv_pool(pool, 100, d_rope=d_rope)
    flat = pool.reshape(-1, pool_bytes(d_qk, d_rope))[:100]
    codes = flat[:, :latent].contiguous().view(torch.float8_e4m3fn).float()
    scales = flat[:, latent:latent + 4 * tiles].contiguous().view(torch.float32)
    step = scales.repeat_interleave(128, dim=1)[:, :latent]
    assert torch.equal(back[:, :latent], (codes * step).bfloat16()) and torch.equal(back[:, latent:], rows[:, latent:])
    error = (back[:, :latent].float() - rows[:, :latent].float()).abs()
    # e4m3's largest step is 32 x scale (codes 256..448): half of it, then bf16's rounding
    assert bool((error <= 16 * step + rows[:, :latent].float().abs() * 2.0 ** -8).all())
    if pow2:
        assert bool((scales.log2() == scales.log2().round()).all())


def test_bad_arguments_name_themselves():
    with pytest.raises(TypeError, match=r"kv must be torch\.bfloat16"):
        quantize_kv_pool(torch.zeros(4, 576))
    with pytest.raises(ValueError, match="d_rope must be"):
        quantize_kv_pool(torch.zeros(4, 576, dtype=torch.bfloat16), d_rope=576)
    with pytest.raises(ValueError, match="block must be"):
        quantize_kv_pool(torch.zeros(4, 576, dtype=torch.bfloat16), block=0)
    pool = quantize_kv_pool(torch.zeros(4, 576, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"num_rows must be an int in \[0, 64\]"):
        dequantize_kv_pool(pool, 65)
    with pytest.raises(ValueError, match="hold no latent"):
        dequantize_kv_pool(pool, 4, d_rope=63)
    assert quantize_kv_pool(torch.zeros(0, 576, dtype=torch.bfloat16)).shape == (0, 64, 1, 656)
