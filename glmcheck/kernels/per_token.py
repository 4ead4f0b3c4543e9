"""Triton kernel: sparse-MLA prefill, one program per query token (and head tile).

Each program walks its token's selected KV rows in blocks of BLOCK_N, gathers each row once (the main [D_V] part
is key and value, the tail [D_TAIL] key only), scores its BLOCK_H heads with two chained MMAs and keeps an online
softmax in fp32 registers: no partial outputs, no second pass.
"""

from __future__ import annotations

import triton
import triton.language as tl

from glmcheck.kernels.device_helpers import gather_kv_rows, online_softmax_step, round_to_bf16, valid_slot_end


@triton.jit
def sparse_mla_token_kernel(
    q_ptr, kv_ptr, idx_ptr, len_ptr, out_ptr, num_kv_rows, num_heads, topk,
    stride_qt, stride_qh, stride_qd, stride_kvs, stride_kvd, stride_it, stride_ik, stride_ot, stride_oh, stride_od,
    qk_scale_log2,
    D_V: tl.constexpr, D_TAIL: tl.constexpr, TAIL_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    KV_INT64: tl.constexpr, UPCAST: tl.constexpr, HAS_LENGTH: tl.constexpr, FIND_BOUND: tl.constexpr,
    END_BLOCK: tl.constexpr,
):
    """out[t, h] = softmax over valid selected rows s of (q[t, h] . kv[s]) * scale, times kv[s, :D_V].

    Grid: (T, cdiv(H, BLOCK_H)). A slot is valid when it is below the bound and its row lies in [0, num_kv_rows).
    The bound is topk, or with HAS_LENGTH `len_ptr[t]` (unread without it). With FIND_BOUND the kernel narrows
    it to one past the last valid slot below it, END_BLOCK slots per step: the same result (later slots are
    empty) and a first pass over the index row that the main loop then reads from cache. `qk_scale_log2` is
    sm_scale * log2(e) (the softmax runs in base 2). UPCAST (CPU interpreter only, which has no bf16 arithmetic)
    upcasts tiles to fp32 after loading. Program p takes token T-1-p: in a causal prefill the last tokens have the
    most rows, so they start first (docs/performance.md, "Launch order: longest first").
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
        kv_main, kv_tail = gather_kv_rows(kv_ptr, rows, valid, offs_d, offs_r, tail_ok, stride_kvs, stride_kvd,
                                          D_V, KV_INT64, UPCAST)
        scores = tl.dot(q_main, tl.trans(kv_main))
        if D_TAIL > 0:
            scores = tl.dot(q_tail, tl.trans(kv_tail), scores)
        scores = tl.where(valid[None, :], scores * qk_scale_log2, float("-inf"))
        m_i, l_i, acc = online_softmax_step(scores, kv_main, m_i, l_i, acc, UPCAST)

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    out_ptrs = out_ptr + token * stride_ot + offs_h[:, None] * stride_oh + offs_d[None, :] * stride_od
    tl.store(out_ptrs, round_to_bf16(out, UPCAST).to(tl.bfloat16), mask=head_ok[:, None])
