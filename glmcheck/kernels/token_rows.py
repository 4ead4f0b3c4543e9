"""Triton kernel: each token's valid selected rows, compacted: a "union" of one token, which the ping-pong tile
reads on the per-token path (rows[t, :n] in slot order, bits 1, lengths[t] = n)."""

from __future__ import annotations

import triton
import triton.language as tl

from glmcheck.kernels.device_helpers import append_rows


@triton.jit
def compact_token_rows_kernel(
    idx_ptr, length_ptr, rows_ptr, bits_ptr, len_ptr, num_kv_rows, topk, stride_it, stride_is, stride_r, stride_b,
    HAS_LENGTH: tl.constexpr, BLOCK: tl.constexpr,
):
    """Grid (T,). Token t's valid rows -> rows[t, :n] (slot order), bits[t, :n] = 1, len[t] = n. With HAS_LENGTH
    the loop stops at the step holding slot topk_length[t] - 1: at 1 x 2048 (calibrated) a token's length is
    half of topk on average (docs/performance.md, "Half pairs"). Slots are addressed directly, one length load
    per program: the group-slot helper of the union builds (a division and a length load per slot) made this
    pass instruction-bound (docs/performance.md, "Per-token compaction")."""
    token = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK)
    ones = tl.full([BLOCK], 1, dtype=tl.int32)
    emitted = tl.zeros([], dtype=tl.int32)
    end = topk
    if HAS_LENGTH:
        end = tl.minimum(tl.maximum(tl.load(length_ptr + token), 0), topk)
    idx_row = idx_ptr + token * stride_it
    for start in range(0, end, BLOCK):
        slot = start + lanes
        live = slot < end
        row = tl.load(idx_row + slot * stride_is, mask=live, other=-1)
        valid = live & (row >= 0) & (row < num_kv_rows)
        emitted = append_rows(rows_ptr + token * stride_r, bits_ptr + token * stride_b, emitted, valid, row, ones, topk)
    tl.store(len_ptr + token, emitted)
