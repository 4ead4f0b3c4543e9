"""Triton kernel: each token's valid selected rows, compacted: a "union" of one token, which the ping-pong tile
reads on the per-token path (rows[t, :n] in slot order, bits 1, lengths[t] = n)."""

from __future__ import annotations

import triton
import triton.language as tl

from glmcheck.kernels.device_helpers import append_rows, load_group_slots


@triton.jit
def compact_token_rows_kernel(
    idx_ptr, length_ptr, rows_ptr, bits_ptr, len_ptr, num_kv_rows, topk, stride_it, stride_is, stride_r, stride_b,
    HAS_LENGTH: tl.constexpr, BLOCK: tl.constexpr,
):
    """Grid (T,). Token t's valid rows -> rows[t, :n] (slot order), bits[t, :n] = 1, len[t] = n. With HAS_LENGTH
    the loop stops at the step holding slot topk_length[t] - 1: at 1 x 2048 (calibrated) a token's length is
    half of topk on average (docs/performance.md, "Half pairs")."""
    token = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK)
    ones = tl.full([BLOCK], 1, dtype=tl.int32)
    emitted = tl.zeros([], dtype=tl.int32)
    end = topk
    if HAS_LENGTH:
        end = tl.minimum(tl.maximum(tl.load(length_ptr + token), 0), topk)
    for start in range(0, end, BLOCK):
        row, _, valid = load_group_slots(idx_ptr, length_ptr, token, start + lanes, topk, topk, num_kv_rows,
                                         stride_it, stride_is, 1, HAS_LENGTH)
        emitted = append_rows(rows_ptr + token * stride_r, bits_ptr + token * stride_b, emitted, valid, row, ones, topk)
    tl.store(len_ptr + token, emitted)
