"""Triton kernel of the tree union build: two sorted unions of G/2 tokens merged into one of G.

Neighbouring groups A and B (ascending, duplicate-free, from the G = 2 merge build) merge without a sort: each row
finds its rank in the other list by binary search (lower_bound), so a row of A lands at i + lower_bound_B(a_i) -
(rows of A before i that B holds), and likewise for B's new rows; a row both hold is written once, from A, with bits
A | B << HALF. The output is again ascending and duplicate-free, so levels repeat (G = 2 -> 4 -> 8); O(n log n) per
level, independent of S.
"""

from __future__ import annotations

import triton
import triton.language as tl

from glmcheck.kernels.device_helpers import lower_bound

EMPTY = tl.constexpr(2**31 - 1)  # sorts after every row


@triton.jit
def _merge_side(own_rows, own_bits, own_count, other_rows, other_bits, other_count, out_rows, out_bits,
                width_out, OWN_SHIFT: tl.constexpr, OTHER_SHIFT: tl.constexpr, KEEP_SHARED: tl.constexpr,
                BLOCK: tl.constexpr, SEARCH_STEPS: tl.constexpr):
    """Write this side's rows at their merged positions; returns how many of them the other side also holds.
    KEEP_SHARED: shared rows are written from this side (A), else skipped (B)."""
    lanes = tl.arange(0, BLOCK)
    shared_before = tl.zeros([], dtype=tl.int32)
    for start in range(0, own_count, BLOCK):
        index = start + lanes
        live = index < own_count
        row = tl.load(own_rows + index, mask=live, other=EMPTY)
        bits = tl.load(own_bits + index, mask=live, other=0).to(tl.int32) << OWN_SHIFT
        rank = lower_bound(other_rows, other_count, row, EMPTY, SEARCH_STEPS)
        in_range = live & (rank < other_count)
        shared = in_range & (tl.load(other_rows + rank, mask=in_range, other=-1) == row)
        flag = shared.to(tl.int32)
        position = index + rank - (shared_before + tl.cumsum(flag, axis=0) - flag)
        keep = live & (position >= 0) & (position < width_out)  # in bounds even for inputs that break the contract
        if KEEP_SHARED:
            other = tl.load(other_bits + rank, mask=shared, other=0).to(tl.int32) << OTHER_SHIFT
            bits = bits | other
        else:
            keep = keep & (~shared)
        tl.store(out_rows + position, row, mask=keep)
        tl.store(out_bits + position, bits.to(tl.uint8), mask=keep)
        shared_before += tl.sum(flag, axis=0)
    return shared_before


@triton.jit
def union_pair_merge_kernel(
    rows_in, bits_in, len_in, rows_out, bits_out, len_out, width_out, stride_ri, stride_bi, stride_ro, stride_bo,
    HALF: tl.constexpr, BLOCK: tl.constexpr, SEARCH_STEPS: tl.constexpr,
):
    """Grid (num_groups_out,). Input groups 2g and 2g+1 (HALF tokens each, rows ascending and distinct, bits uint8)
    -> output group g (2*HALF tokens): rows ascending, len_out[g] = n."""
    group = tl.program_id(0).to(tl.int64)
    a, b = 2 * group, 2 * group + 1
    count_a = tl.load(len_in + a)
    count_b = tl.load(len_in + b)
    out_rows = rows_out + group * stride_ro
    out_bits = bits_out + group * stride_bo
    shared = _merge_side(rows_in + a * stride_ri, bits_in + a * stride_bi, count_a,
                         rows_in + b * stride_ri, bits_in + b * stride_bi, count_b,
                         out_rows, out_bits, width_out, 0, HALF, True, BLOCK, SEARCH_STEPS)
    _merge_side(rows_in + b * stride_ri, bits_in + b * stride_bi, count_b,
                rows_in + a * stride_ri, bits_in + a * stride_bi, count_a,
                out_rows, out_bits, width_out, HALF, 0, False, BLOCK, SEARCH_STEPS)
    tl.store(len_out + group, count_a + count_b - shared)
