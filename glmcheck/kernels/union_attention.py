"""Triton kernel: sparse-MLA prefill for a group of G adjacent tokens over their union of rows.

One program per group; the query tile holds G*H rows, token-major (row r: token r // H, head r % H). Each union row
is gathered once and scored for all G tokens; a row whose ownership bit for a token is 0 scores -inf for it, so
each token keeps exactly its own softmax.
"""

from __future__ import annotations

import triton
import triton.language as tl

from glmcheck.kernels.device_helpers import gather_kv_rows, online_softmax_step, round_to_bf16


@triton.jit
def _owned_scores(q_main, q_tail, kv_main, kv_tail, bits, live, member, qk_scale_log2, D_TAIL: tl.constexpr):
    """Base-2 scores [M, N] of one gathered block; -inf where the row's token does not own it."""
    scores = tl.dot(q_main, tl.trans(kv_main))
    if D_TAIL > 0:
        scores = tl.dot(q_tail, tl.trans(kv_tail), scores)
    owned = ((bits[None, :] >> member[:, None]) & 1) != 0
    return tl.where(owned & live[None, :], scores * qk_scale_log2, float("-inf"))


@triton.jit
def sparse_mla_union_kernel(
    q_ptr, kv_ptr, rows_ptr, bits_ptr, len_ptr, out_ptr,
    stride_qt, stride_qh, stride_qd, stride_kvs, stride_kvd, stride_rg, stride_bg, stride_ot, stride_oh, stride_od,
    qk_scale_log2, H: tl.constexpr, G: tl.constexpr, D_V: tl.constexpr, D_TAIL: tl.constexpr, TAIL_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr, KV_INT64: tl.constexpr, UPCAST: tl.constexpr,
):
    """Grid (num_groups,). rows/bits/len come from the union build (rows always in [0, S)).

    The loop is left to Triton's pipeliner: carrying the next block's rows one step ahead, or gathering it into
    registers before this block's MMAs, measured slower on the H200 (docs/performance.md, "The Triton union tile").
    Program p takes group num_programs - 1 - p: later (longer) groups start first ("Launch order: longest first").
    """
    BLOCK_M: tl.constexpr = G * H
    group = tl.num_programs(0).to(tl.int64) - 1 - tl.program_id(0).to(tl.int64)
    offs_m = tl.arange(0, BLOCK_M)
    member = offs_m // H
    token = group * G + member
    head = offs_m % H
    offs_d = tl.arange(0, D_V)
    offs_r = tl.arange(0, TAIL_PAD)
    tail_ok = offs_r < D_TAIL
    lanes = tl.arange(0, BLOCK_N)

    q_row = q_ptr + token[:, None] * stride_qt + head[:, None] * stride_qh
    q_main = tl.load(q_row + offs_d[None, :] * stride_qd)
    q_tail = tl.load(q_row + (D_V + offs_r)[None, :] * stride_qd, mask=tail_ok[None, :], other=0.0)
    if UPCAST:
        q_main = q_main.to(tl.float32)
        q_tail = q_tail.to(tl.float32)

    length = tl.load(len_ptr + group)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D_V], dtype=tl.float32)
    union_rows = rows_ptr + group * stride_rg
    union_bits = bits_ptr + group * stride_bg
    for start in range(0, length, BLOCK_N):
        offs_n = start + lanes
        live = offs_n < length
        rows = tl.load(union_rows + offs_n, mask=live, other=0)
        bits = tl.load(union_bits + offs_n, mask=live, other=0).to(tl.int32)
        kv_main, kv_tail = gather_kv_rows(kv_ptr, rows, live, offs_d, offs_r, tail_ok, stride_kvs, stride_kvd,
                                          D_V, KV_INT64, UPCAST)
        scores = _owned_scores(q_main, q_tail, kv_main, kv_tail, bits, live, member, qk_scale_log2, D_TAIL)
        m_i, l_i, acc = online_softmax_step(scores, kv_main, m_i, l_i, acc, UPCAST)

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    out_ptrs = out_ptr + token[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :] * stride_od
    tl.store(out_ptrs, round_to_bf16(out, UPCAST).to(tl.bfloat16))
