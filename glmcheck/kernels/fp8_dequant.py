"""The FP8 KV pool's dequantisation in one Triton launch: `dequantize_kv_pool_fused`, bit for bit
`glmcheck.kernels.fp8.dequantize_kv_pool` (the pool's layout is that module's docstring), and its device helpers
(little-endian loads of the scales and rope bits, the e4m3 decode, the bf16 rounding; the last two tested alone).

Bit-exact in both worlds: the pool's bytes are read one by one and assembled little-endian (no alignment needed),
an e4m3fn code is decoded with integer ops in the interpreter (whose float8 cast reads 0x7F as 480, not NaN) and
by the hardware cvt on the GPU (exact for all 256 codes), code x scale is one fp32 multiply as in the torch form,
and the bf16 rounding is the GPU's cvt there (the instruction torch's CUDA cast runs) and integer round-to-nearest-
even in the interpreter, with NaN given torch's own CPU bits (its vectorised cast writes 0xFFFF, the scalar one
0x7FC0: measured once, not assumed).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from glmcheck.kernels.fp8 import TILE, check_pool
from glmcheck.kernels.runtime import require_kernel_device

BLOCK_ROWS = 32  # pool rows a program dequantises
INT32_LIMIT = 2**31


@triton.jit
def load_fp32_le(byte_ptrs, stride_b, mask):
    """The fp32 whose 4 little-endian bytes start at `byte_ptrs` (byte stride `stride_b`); 0 where not `mask`."""
    word = tl.load(byte_ptrs, mask=mask, other=0).to(tl.uint32)
    word = word | (tl.load(byte_ptrs + stride_b, mask=mask, other=0).to(tl.uint32) << 8)
    word = word | (tl.load(byte_ptrs + 2 * stride_b, mask=mask, other=0).to(tl.uint32) << 16)
    word = word | (tl.load(byte_ptrs + 3 * stride_b, mask=mask, other=0).to(tl.uint32) << 24)
    return word.to(tl.float32, bitcast=True)


@triton.jit
def load_u16_le(byte_ptrs, stride_b, mask):
    """The 16-bit word (as uint32 in [0, 65535]) whose 2 little-endian bytes start at `byte_ptrs`; 0 where not
    `mask`. A bf16 rope value's bits, moved as an integer so every bit pattern (NaN payloads too) survives."""
    low = tl.load(byte_ptrs, mask=mask, other=0).to(tl.uint32)
    return low | (tl.load(byte_ptrs + stride_b, mask=mask, other=0).to(tl.uint32) << 8)


@triton.jit
def decode_e4m3(codes, NATIVE: tl.constexpr):
    """fp32 values of e4m3fn codes (uint8): sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is
    subnormal (m x 2^-9); 0x7F / 0xFF are NaN (no infinities). NATIVE (GPU): the hardware conversion; otherwise
    integer ops, exact everywhere."""
    if NATIVE:
        return codes.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    else:
        c = codes.to(tl.uint32)
        exponent = (c >> 3) & 15
        mantissa = c & 7
        normal = (((exponent + 120) << 23) | (mantissa << 20)).to(tl.float32, bitcast=True)
        magnitude = tl.where(exponent == 0, mantissa.to(tl.float32) * 0.001953125, normal)
        magnitude = tl.where((c & 0x7F) == 0x7F, float("nan"), magnitude)
        return (magnitude.to(tl.uint32, bitcast=True) | ((c >> 7) << 31)).to(tl.float32, bitcast=True)


@triton.jit
def bf16_bits(x, NATIVE: tl.constexpr, NAN_BITS: tl.constexpr):
    """The bits (int16) of fp32 `x` rounded to bf16, to nearest even: NATIVE (GPU) the cvt instruction, otherwise
    integer ops (the interpreter's cast truncates) with every NaN given NAN_BITS (torch's CPU NaN)."""
    if NATIVE:
        return x.to(tl.bfloat16).to(tl.int16, bitcast=True)
    else:
        bits = x.to(tl.uint32, bitcast=True)
        rounded = (bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16
        rounded = tl.where((bits & 0x7FFFFFFF) > 0x7F800000, NAN_BITS, rounded)  # NaN
        return rounded.to(tl.int16)


@triton.jit
def dequantize_pool_kernel(
    pool_ptr, out_ptr, num_rows, stride_pp, stride_ps, stride_pb, stride_or, stride_oc,
    PAGE_ROWS: tl.constexpr, LATENT: tl.constexpr, TILES: tl.constexpr, D_ROPE: tl.constexpr, ROPE_PAD: tl.constexpr,
    BLOCK_R: tl.constexpr, TILE_COLS: tl.constexpr, ROW_INT64: tl.constexpr, NATIVE_DECODE: tl.constexpr,
    NATIVE_ROUND: tl.constexpr, NAN_BITS: tl.constexpr,
):
    """out[r] = the pool's row r (page r // PAGE_ROWS, slot r % PAGE_ROWS) dequantised, for r < num_rows; `out_ptr`
    is the int16 view of the bf16 output [num_rows, LATENT + D_ROPE]. Grid: (cdiv(num_rows, BLOCK_R),)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    live = rows < num_rows
    if ROW_INT64:
        rows = rows.to(tl.int64)
    row_ptr = pool_ptr + (rows // PAGE_ROWS) * stride_pp + (rows % PAGE_ROWS) * stride_ps
    out_row = out_ptr + rows * stride_or
    offs = tl.arange(0, TILE_COLS)
    for tile in tl.static_range(TILES):
        cols = tile * TILE_COLS + offs
        ok = live[:, None] & (cols < LATENT)[None, :]
        codes = tl.load(row_ptr[:, None] + cols[None, :] * stride_pb, mask=ok, other=0)
        scale = load_fp32_le(row_ptr + (LATENT + 4 * tile) * stride_pb, stride_pb, live)
        values = decode_e4m3(codes, NATIVE_DECODE) * scale[:, None]  # one fp32 rounding, as the torch form
        tl.store(out_row[:, None] + cols[None, :] * stride_oc, bf16_bits(values, NATIVE_ROUND, NAN_BITS), mask=ok)
    if D_ROPE > 0:
        r = tl.arange(0, ROPE_PAD)
        ok = live[:, None] & (r < D_ROPE)[None, :]
        bits = load_u16_le(row_ptr[:, None] + (LATENT + 4 * TILES + 2 * r)[None, :] * stride_pb, stride_pb, ok)
        tl.store(out_row[:, None] + (LATENT + r)[None, :] * stride_oc, bits.to(tl.int16), mask=ok)


@functools.cache
def torch_cpu_nan_bits() -> int:
    """The bf16 bits (in [0, 65535]) torch's CPU cast gives a NaN fp32 in the torch form's copy (code x scale into a
    column slice of a bf16 row)."""
    out = torch.zeros((2, 2 * TILE), dtype=torch.bfloat16)
    out[:, :TILE] = torch.full((2, TILE), float("nan")) * torch.ones((2, 1))
    return int(out.view(torch.int16)[1, TILE - 1]) & 0xFFFF


def native_e4m3(device: torch.device) -> bool:
    """True where the hardware converts e4m3 (CUDA capability 8.9 and up); elsewhere the integer decode runs."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9)


def _check_out(out: object, pool: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if out.dtype != torch.bfloat16:
        raise TypeError(f"out must be torch.bfloat16, got {out.dtype}")
    if tuple(out.shape) != shape:
        raise ValueError(f"out must have shape {list(shape)}, got {tuple(out.shape)}")
    if out.device != pool.device:
        raise ValueError(f"out must be on {pool.device} (the device of pool), got {out.device}")
    if out.numel() and out.untyped_storage().data_ptr() == pool.untyped_storage().data_ptr():
        raise ValueError("out must not share storage with pool (the kernel would write where it reads)")
    return out


def dequantize_kv_pool_fused(pool: torch.Tensor, num_rows: int, *, d_rope: int = 64,
                             out: torch.Tensor | None = None) -> torch.Tensor:
    """`dequantize_kv_pool(pool, num_rows, d_rope=d_rope)` in one launch, bit for bit (NaN / Inf rows included):
    the first `num_rows` rows of the pool [pages, block, 1, bytes] uint8 as [num_rows, d_qk] bf16 on the pool's
    device. Rows at or past `num_rows` are not read. `out` [num_rows, d_qk] bf16 (any strides) is written when
    given, else allocated. Argument errors name the argument (ValueError; TypeError for out's type and dtype)."""
    latent, tiles = check_pool(pool, num_rows, d_rope)
    require_kernel_device(pool, "pool")
    shape = (num_rows, latent + d_rope)
    if out is None:
        out = torch.empty(shape, dtype=torch.bfloat16, device=pool.device)
    else:
        out = _check_out(out, pool, shape)
    if num_rows == 0:
        return out
    _, block, _, width = pool.shape
    pages_read = triton.cdiv(num_rows, block)
    last_byte = (pages_read - 1) * pool.stride(0) + (block - 1) * pool.stride(1) + (width - 1) * pool.stride(3)
    last_out = (num_rows - 1) * out.stride(0) + (shape[1] - 1) * out.stride(1)
    native_round = pool.device.type == "cuda"
    grid = (triton.cdiv(num_rows, BLOCK_ROWS),)
    dequantize_pool_kernel[grid](
        pool, out.view(torch.int16), num_rows, pool.stride(0), pool.stride(1), pool.stride(3),
        out.stride(0), out.stride(1),
        PAGE_ROWS=block, LATENT=latent, TILES=tiles, D_ROPE=d_rope,
        ROPE_PAD=max(16, triton.next_power_of_2(max(d_rope, 1))),
        BLOCK_R=BLOCK_ROWS, TILE_COLS=TILE, ROW_INT64=max(last_byte, last_out) >= INT32_LIMIT,
        NATIVE_DECODE=native_e4m3(pool.device), NATIVE_ROUND=native_round,
        NAN_BITS=0 if native_round else torch_cpu_nan_bits(), num_warps=4,
    )
    return out
