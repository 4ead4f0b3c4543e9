"""Triton kernel: deduplicated union of the KV rows selected by G adjacent tokens.

One program per group of G tokens. First it sorts each token's selected rows on their own
(tl.sort in registers; empty slots become INT32_MAX and sort last) into a per-call scratch
row, with the token's count of valid rows. Then, for every row of token j, it runs a
vectorised binary search (lower_bound) in the sorted lists of the other tokens of the group. The row is emitted once, by the first token that selected it, with
an ownership bitmask (bit i set when token i of the group selected it); rows are compacted by a
prefix sum. Cost O(G * K * log K) per group; nothing depends on the KV span S.

Launchers live in `glmcheck.kernels.union`; this file holds device code only.
"""

from __future__ import annotations

import triton
import triton.language as tl

INT32_MAX = 2**31 - 1  # host value: sorts after every row
EMPTY = tl.constexpr(INT32_MAX)  # the same value inside kernels


@triton.jit
def _contains(sorted_row, count, needle, SEARCH_STEPS: tl.constexpr):
    """Bool per lane: `needle` occurs in sorted_row[0:count] (lower_bound, then compare)."""
    lo = tl.zeros_like(needle)
    hi = tl.zeros_like(needle) + count
    for _ in tl.static_range(SEARCH_STEPS):
        active = lo < hi
        mid = (lo + hi) >> 1
        probe = tl.load(sorted_row + mid, mask=active, other=EMPTY)
        right = probe < needle
        lo = tl.where(active & right, mid + 1, lo)
        hi = tl.where(active & (~right), mid, hi)
    inside = lo < count
    at = tl.load(sorted_row + lo, mask=inside, other=-1)
    return inside & (at == needle)


@triton.jit
def _sort_group_rows(idx_ptr, limit_ptr, sorted_ptr, count_ptr, first_token, num_kv_rows, topk,
                     stride_it, stride_ik, stride_st,
                     G: tl.constexpr, K_PAD: tl.constexpr, HAS_LIMIT: tl.constexpr):
    """Sort the valid rows of tokens first_token .. first_token+G-1 into sorted_ptr; counts too."""
    slots = tl.arange(0, K_PAD)
    for member in tl.static_range(G):
        token = first_token + member
        raw = tl.load(idx_ptr + token * stride_it + slots * stride_ik, mask=slots < topk, other=-1)
        limit = topk
        if HAS_LIMIT:
            limit = tl.minimum(tl.maximum(tl.load(limit_ptr + token), 0), topk)
        valid = (slots < limit) & (raw >= 0) & (raw < num_kv_rows)
        ordered = tl.sort(tl.where(valid, raw, EMPTY))
        tl.store(sorted_ptr + token * stride_st + slots, ordered)
        tl.store(count_ptr + token, tl.sum(valid.to(tl.int32), axis=0))


@triton.jit
def union_build_kernel(
    idx_ptr, limit_ptr, sorted_ptr, count_ptr, rows_ptr, bits_ptr, len_ptr,
    num_kv_rows, topk,
    stride_it, stride_ik, stride_st, stride_rg, stride_bg,
    G: tl.constexpr, K_PAD: tl.constexpr, HAS_LIMIT: tl.constexpr,
    BLOCK: tl.constexpr, SEARCH_STEPS: tl.constexpr,
):
    """Grid (num_groups,). Writes rows[g, :n], bits[g, :n] and len[g] = n for group g.

    sorted_ptr [G * num_groups, K_PAD] and count_ptr [G * num_groups] are per-call scratch,
    written and read by the same program (a barrier orders the two).
    """
    group = tl.program_id(0).to(tl.int64)
    first_token = group * G
    _sort_group_rows(idx_ptr, limit_ptr, sorted_ptr, count_ptr, first_token, num_kv_rows, topk,
                     stride_it, stride_ik, stride_st, G, K_PAD, HAS_LIMIT)
    tl.debug_barrier()
    out_rows = rows_ptr + group * stride_rg
    out_bits = bits_ptr + group * stride_bg
    emitted = tl.zeros([], dtype=tl.int32)
    lanes = tl.arange(0, BLOCK)
    for owner in tl.static_range(G):
        own_row = sorted_ptr + (first_token + owner) * stride_st
        own_count = tl.load(count_ptr + first_token + owner)
        for start in range(0, own_count, BLOCK):
            slot = start + lanes
            live = slot < own_count
            row = tl.load(own_row + slot, mask=live, other=EMPTY)
            bits = tl.zeros([BLOCK], dtype=tl.int32) + (1 << owner)
            emit = live
            for other in tl.static_range(G):
                if other != owner:
                    other_row = sorted_ptr + (first_token + other) * stride_st
                    other_count = tl.load(count_ptr + first_token + other)
                    found = _contains(other_row, other_count, row, SEARCH_STEPS)
                    bits = bits | tl.where(found, 1 << other, 0)
                    if other < owner:
                        emit = emit & (~found)
            flag = emit.to(tl.int32)
            position = emitted + tl.cumsum(flag, axis=0) - 1
            tl.store(out_rows + position, row, mask=emit)
            tl.store(out_bits + position, bits.to(tl.int8), mask=emit)
            emitted += tl.sum(flag, axis=0)
    tl.store(len_ptr + group, emitted)
