"""Triton kernel of the search union build: the distinct KV rows of G adjacent tokens.

Input: each token's valid rows sorted ascending (INT32_MAX last) and its count. One program per group: each row of
token j is binary-searched (lower_bound) in the other tokens' lists and emitted once, by the first token that
selected it, with its ownership bits (bit i: token i selected it), compacted by a prefix sum. O(G * K * log K) per
group, independent of S.
"""

from __future__ import annotations

import triton
import triton.language as tl

from glmcheck.kernels.device_helpers import append_rows, lower_bound

INT32_MAX = 2**31 - 1  # host value: sorts after every row
EMPTY = tl.constexpr(INT32_MAX)  # the same value inside kernels


@triton.jit
def _contains(sorted_row, count, needle, SEARCH_STEPS: tl.constexpr):
    """Bool per lane: `needle` occurs in sorted_row[0:count] (lower_bound, then compare)."""
    lo = lower_bound(sorted_row, count, needle, EMPTY, SEARCH_STEPS)
    inside = lo < count
    at = tl.load(sorted_row + lo, mask=inside, other=-1)
    return inside & (at == needle)


@triton.jit
def union_build_kernel(
    sorted_ptr, count_ptr, rows_ptr, bits_ptr, len_ptr, stride_st, stride_rg, stride_bg,
    G: tl.constexpr, BLOCK: tl.constexpr, SEARCH_STEPS: tl.constexpr,
):
    """Grid (num_groups,). Writes rows[g, :n], bits[g, :n] and len[g] = n for group g."""
    group = tl.program_id(0).to(tl.int64)
    first_token = group * G
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
            emitted = append_rows(out_rows, out_bits, emitted, emit, row, bits, stride_rg)
    tl.store(len_ptr + group, emitted)
