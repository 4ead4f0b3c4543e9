"""Triton kernel of the anchor union build (G = 2): one token of each pair sorted, not both.

Token 2g (the anchor) comes with its valid rows sorted (empty slots last, as the dtype's largest value); token
2g+1's rows are read as they are. One program per pair copies the anchor's rows out with bits 1; after a CTA
barrier (the next pass overwrites some of those bits) it looks each valid row of token 2g+1 up in the anchor's
list (lower_bound): a shared row gets bits 3 at the anchor's position (a token's rows are distinct, so no two lanes
write one position), a new one is appended with bits 2 (prefix-sum compaction). The sort handles half the merge
build's keys; O(K log K) per pair, independent of S.
"""

from __future__ import annotations

import triton
import triton.language as tl

from glmcheck.kernels.device_helpers import append_rows, lower_bound


@triton.jit
def union_anchor_kernel(
    sorted_ptr, idx_ptr, length_ptr, rows_ptr, bits_ptr, len_ptr,
    num_kv_rows, topk, stride_sg, stride_it, stride_is, stride_rg, stride_bg,
    HAS_LENGTH: tl.constexpr, BLOCK: tl.constexpr, SEARCH_STEPS: tl.constexpr, EMPTY: tl.constexpr,
):
    """Grid (num_pairs,). sorted[g, :topk]: token 2g's valid rows ascending, then EMPTY (int16 or int32, EMPTY above
    every valid row). idx [T, topk] the raw selections (token 2g+1 is read from it; validity as everywhere:
    0 <= row < num_kv_rows, slot < topk_length[t] when HAS_LENGTH). Writes rows[g, :n], bits[g, :n], len[g] = n."""
    pair = tl.program_id(0).to(tl.int64)
    anchor = sorted_ptr + pair * stride_sg
    out_rows = rows_ptr + pair * stride_rg
    out_bits = bits_ptr + pair * stride_bg
    lanes = tl.arange(0, BLOCK)

    anchor_count = tl.zeros([], dtype=tl.int32)
    for start in range(0, topk, BLOCK):
        slot = start + lanes
        row = tl.load(anchor + slot, mask=slot < topk, other=EMPTY).to(tl.int32)
        keep = row != EMPTY
        tl.store(out_rows + slot, row, mask=keep)
        tl.store(out_bits + slot, tl.full([BLOCK], 1, dtype=tl.uint8), mask=keep)
        anchor_count += tl.sum(keep.to(tl.int32), axis=0)
    tl.debug_barrier()

    partner = pair * 2 + 1
    emitted = anchor_count
    for start in range(0, topk, BLOCK):
        slot = start + lanes
        in_row = slot < topk
        row = tl.load(idx_ptr + partner * stride_it + slot * stride_is, mask=in_row, other=-1)
        valid = in_row & (row >= 0) & (row < num_kv_rows)
        if HAS_LENGTH:
            valid = valid & (slot < tl.load(length_ptr + partner))
        at = lower_bound(anchor, anchor_count, row, EMPTY, SEARCH_STEPS)
        inside = valid & (at < anchor_count)
        found = inside & (tl.load(anchor + at, mask=inside, other=EMPTY).to(tl.int32) == row)
        tl.store(out_bits + at, tl.full([BLOCK], 3, dtype=tl.uint8), mask=found)
        emitted = append_rows(out_rows, out_bits, emitted, valid & (~found), row,
                              tl.full([BLOCK], 2, dtype=tl.int32), stride_rg)
    tl.store(len_ptr + pair, emitted)
