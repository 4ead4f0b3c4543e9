"""Triton kernel: sparse-MLA prefill over the FP8 KV pool itself, one program per query token (and head tile).

The per-token kernel (`glmcheck.kernels.per_token`) with its gather replaced: each selected row is read from the
paged pool (`glmcheck.kernels.fp8`: row r at page r // PAGE_ROWS, slot r % PAGE_ROWS; D_V e4m3 codes, one fp32
scale per 128 of them, D_TAIL bf16 rope values) and dequantised in registers to the bf16 values
`dequantize_kv_pool` gives (code x scale in fp32, rounded once to bf16; the rope bits as stored), so the two
chained MMAs, the online softmax and P.V see the values the bf16 kernel sees over the dequantised rows.
"""

from __future__ import annotations

import triton
import triton.language as tl

from glmcheck.kernels.device_helpers import online_softmax_step, round_to_bf16, valid_slot_end
from glmcheck.kernels.fp8_dequant import decode_e4m3, load_fp32_le, load_u16_le


@triton.jit
def gather_pool_rows(pool_ptr, rows, live, offs_r, tail_ok, stride_pp, stride_ps, stride_pb, PAGE_ROWS: tl.constexpr,
                     D_V: tl.constexpr, TILE_W: tl.constexpr, ROW_INT64: tl.constexpr, UPCAST: tl.constexpr,
                     NATIVE_DECODE: tl.constexpr):
    """Pool rows `rows` [N] dequantised: the latent [N, D_V] (key and value) and the rope [N, TAIL_PAD] (key only,
    columns offs_r where tail_ok), zeros where not `live`. bf16 on the GPU; fp32 holding the bf16 values when
    UPCAST (interpreter). Column c takes its row's scale c // TILE_W (TILE_W = min(D_V, 128)), chosen by selects
    on the [N, D_V] tile (a [N, tiles, TILE_W] tile reshaped to [N, D_V] spills on sm_90). Byte offsets in int64
    when ROW_INT64."""
    rows = tl.where(live, rows, 0)  # an empty slot's row (-1, past the pool) never forms an address
    if ROW_INT64:
        rows = rows.to(tl.int64)
    row_ptr = pool_ptr + (rows // PAGE_ROWS) * stride_pp + (rows % PAGE_ROWS) * stride_ps
    offs_d = tl.arange(0, D_V)
    codes = tl.load(row_ptr[:, None] + offs_d[None, :] * stride_pb, mask=live[:, None], other=0)
    scale = load_fp32_le(row_ptr + D_V * stride_pb, stride_pb, live)[:, None]
    for tile in tl.static_range(1, D_V // TILE_W):  # columns from tile * TILE_W on take that tile's scale
        tile_scale = load_fp32_le(row_ptr + (D_V + 4 * tile) * stride_pb, stride_pb, live)
        scale = tl.where((offs_d >= tile * TILE_W)[None, :], tile_scale[:, None], scale)
    latent = round_to_bf16(decode_e4m3(codes, NATIVE_DECODE) * scale, UPCAST)  # one fp32 product, one rounding
    rope_at = D_V + 4 * (D_V // TILE_W) + 2 * offs_r  # the rope's bytes follow the codes and the scales
    rope_ok = live[:, None] & tail_ok[None, :]
    rope_bits = load_u16_le(row_ptr[:, None] + rope_at[None, :] * stride_pb, stride_pb, rope_ok)
    if UPCAST:
        rope = (rope_bits << 16).to(tl.float32, bitcast=True)
    else:
        rope = rope_bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    return latent, rope


@triton.jit
def sparse_mla_fp8_token_kernel(
    q_ptr, pool_ptr, idx_ptr, len_ptr, out_ptr, num_kv_rows, num_heads, topk,
    stride_qt, stride_qh, stride_qd, stride_pp, stride_ps, stride_pb, stride_it, stride_ik,
    stride_ot, stride_oh, stride_od, qk_scale_log2, PAGE_ROWS: tl.constexpr,
    D_V: tl.constexpr, D_TAIL: tl.constexpr, TAIL_PAD: tl.constexpr, TILE_W: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, ROW_INT64: tl.constexpr, UPCAST: tl.constexpr,
    NATIVE_DECODE: tl.constexpr, HAS_LENGTH: tl.constexpr, FIND_BOUND: tl.constexpr, END_BLOCK: tl.constexpr,
):
    """out[t, h] = softmax over valid selected rows s of (q[t, h] . kv[s]) * scale, times kv[s, :D_V], where kv[s]
    is pool row s dequantised (`gather_pool_rows`).

    Grid: (T, cdiv(H, BLOCK_H)). A slot is valid when it is below the bound and its row lies in [0, num_kv_rows).
    The bound, FIND_BOUND, HAS_LENGTH, UPCAST, `qk_scale_log2` and the launch order (program p takes token T-1-p)
    are the per-token kernel's (`glmcheck.kernels.per_token`).
    """
    token = tl.num_programs(0).to(tl.int64) - 1 - tl.program_id(0).to(tl.int64)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = offs_h < num_heads
    offs_d = tl.arange(0, D_V)
    offs_r = tl.arange(0, TAIL_PAD)
    tail_ok = offs_r < D_TAIL

    q_row = q_ptr + token * stride_qt + offs_h[:, None] * stride_qh
    q_main = tl.load(q_row + offs_d[None, :] * stride_qd, mask=head_ok[:, None], other=0.0)
    q_tail = tl.load(q_row + (D_V + offs_r)[None, :] * stride_qd, mask=head_ok[:, None] & tail_ok[None, :], other=0.0)
    if UPCAST:
        q_main = q_main.to(tl.float32)
        q_tail = q_tail.to(tl.float32)

    idx_row = idx_ptr + token * stride_it
    if HAS_LENGTH:
        length = tl.load(len_ptr + token)
        length = tl.minimum(tl.maximum(length, 0), topk)
    else:
        length = topk
    if FIND_BOUND:
        length = valid_slot_end(idx_row, stride_ik, length, num_kv_rows, END_BLOCK)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, D_V], dtype=tl.float32)
    for start in range(0, length, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        in_len = offs_n < length
        rows = tl.load(idx_row + offs_n * stride_ik, mask=in_len, other=-1)
        valid = in_len & (rows >= 0) & (rows < num_kv_rows)
        kv_main, kv_tail = gather_pool_rows(pool_ptr, rows, valid, offs_r, tail_ok, stride_pp, stride_ps, stride_pb,
                                            PAGE_ROWS, D_V, TILE_W, ROW_INT64, UPCAST, NATIVE_DECODE)
        scores = tl.dot(q_main, tl.trans(kv_main))
        if D_TAIL > 0:
            scores = tl.dot(q_tail, tl.trans(kv_tail), scores)
        scores = tl.where(valid[None, :], scores * qk_scale_log2, float("-inf"))
        m_i, l_i, acc = online_softmax_step(scores, kv_main, m_i, l_i, acc, UPCAST)

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    out_ptrs = out_ptr + token * stride_ot + offs_h[:, None] * stride_oh + offs_d[None, :] * stride_od
    tl.store(out_ptrs, round_to_bf16(out, UPCAST).to(tl.bfloat16), mask=head_ok[:, None])
