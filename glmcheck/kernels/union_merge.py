"""Triton kernels of the merged-sort union build (no binary search).

Each selected slot of token t becomes one key `row * G + (t mod G)`; empty slots become the
largest value of the key dtype (int16 when every key fits below it, else int32: radix-sorting
16-bit keys takes 0.70x the time of 32-bit ones on the H200). Sorting the G*topk keys of a
group makes the copies of one KV row neighbours (at most G of them, ordered by token), so one
linear pass finds each row's first copy, ORs the ownership
bits of the copies that follow it and compacts the rows by a prefix sum. Legal while
num_kv_rows * G <= INT32_MAX (the key must not overflow). Nothing depends on the KV span S.

The group's keys are sorted either by torch.sort (`union_keys_kernel` writes them per token) or
inside one program per group (`union_sorted_keys_kernel`: a bitonic tl.sort of the whole group in
registers, no second pass over memory).

Launchers live in `glmcheck.kernels.union`; this file holds device code only.
"""

from __future__ import annotations

import triton
import triton.language as tl

from glmcheck.kernels.device_helpers import append_rows, load_group_slots

EMPTY_KEY = tl.constexpr(2**31 - 1)  # sorts after every int32 key


@triton.jit
def union_keys_kernel(
    idx_ptr, length_ptr, keys_ptr,
    num_kv_rows, topk, stride_it, stride_is, stride_len,
    G: tl.constexpr, HAS_LENGTH: tl.constexpr, BLOCK: tl.constexpr, EMPTY: tl.constexpr,
):
    """Grid (tokens, cdiv(topk, BLOCK)). keys[t, s] = idx[t, s] * G + t % G for a valid slot
    (0 <= idx < num_kv_rows, s < topk_length[t], read at length_ptr + t * stride_len), EMPTY
    otherwise; keys is [tokens, topk]
    contiguous (int16 or int32; EMPTY is the dtype's largest value and above every valid key),
    so a group's keys are the contiguous G*topk run starting at its first token."""
    token = tl.program_id(0).to(tl.int64)
    slot = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    in_row = slot < topk
    row = tl.load(idx_ptr + token * stride_it + slot * stride_is, mask=in_row, other=-1)
    valid = in_row & (row >= 0) & (row < num_kv_rows)
    if HAS_LENGTH:
        valid = valid & (slot < tl.load(length_ptr + token * stride_len))
    key = tl.where(valid, row * G + (token % G).to(tl.int32), EMPTY)
    tl.store(keys_ptr + token * topk + slot, key.to(keys_ptr.dtype.element_ty), mask=in_row)


@triton.jit
def union_sorted_keys_kernel(
    idx_ptr, length_ptr, sorted_ptr,
    num_kv_rows, topk, stride_it, stride_is, stride_sg,
    G: tl.constexpr, HAS_LENGTH: tl.constexpr, WIDTH_PAD: tl.constexpr,
):
    """Grid (num_groups,). sorted[g, :G*topk] = group g's keys (as union_keys_kernel makes them),
    ascending. WIDTH_PAD is a power of two >= G*topk; the padding sorts last as EMPTY_KEY."""
    group = tl.program_id(0).to(tl.int64)
    width = G * topk
    pos = tl.arange(0, WIDTH_PAD)
    row, member, valid = load_group_slots(idx_ptr, length_ptr, group, pos, width, topk, num_kv_rows,
                                          stride_it, stride_is, G, HAS_LENGTH)
    key = tl.where(valid, row * G + member.to(tl.int32), EMPTY_KEY)
    tl.store(sorted_ptr + group * stride_sg + pos, tl.sort(key), mask=pos < width)


@triton.jit
def union_merge_kernel(
    sorted_ptr, rows_ptr, bits_ptr, len_ptr,
    width, stride_sg, stride_rg, stride_bg,
    G: tl.constexpr, LOG2_G: tl.constexpr, BLOCK: tl.constexpr, EMPTY: tl.constexpr,
):
    """Grid (num_groups,). sorted[g, :width] holds group g's keys ascending (width = G*topk;
    int16 or int32, empty slots = EMPTY).
    Writes rows[g, :n] (each distinct valid row once, ascending), bits[g, :n] (bit i = token i
    of the group selected it) and len[g] = n."""
    group = tl.program_id(0).to(tl.int64)
    keys_row = sorted_ptr + group * stride_sg
    out_rows = rows_ptr + group * stride_rg
    out_bits = bits_ptr + group * stride_bg
    emitted = tl.zeros([], dtype=tl.int32)
    lanes = tl.arange(0, BLOCK)
    for start in range(0, width, BLOCK):
        pos = start + lanes
        key = tl.load(keys_row + pos, mask=pos < width, other=EMPTY).to(tl.int32)
        row = key >> LOG2_G
        live = key != EMPTY
        has_prev = (pos > 0) & (pos < width)
        prev = tl.load(keys_row + pos - 1, mask=has_prev, other=EMPTY).to(tl.int32)
        first = live & ((~has_prev) | ((prev >> LOG2_G) != row))
        bits = tl.zeros([BLOCK], dtype=tl.int32)
        for ahead in tl.static_range(G):  # copies of a row are adjacent, at most G of them
            nxt = tl.load(keys_row + pos + ahead, mask=pos + ahead < width, other=EMPTY).to(tl.int32)
            same = (nxt != EMPTY) & ((nxt >> LOG2_G) == row)
            bits = bits | tl.where(same, 1 << (nxt & (G - 1)), 0)
        emitted = append_rows(out_rows, out_bits, emitted, first, row, bits, width)
    tl.store(len_ptr + group, emitted)
