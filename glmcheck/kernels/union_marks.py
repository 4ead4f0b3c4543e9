"""Triton kernel of the marks union build: no sort, one launch, exact prefix groups recognised on the device.

Each program owns one byte row of a scratch table `marks` [programs, num_kv_rows] uint8 and builds the groups g =
pid, pid + programs, ... in turn. Per group, one pass over its G token rows (all tokens at once) finds each token's
valid count and lowest and highest row. A token whose count is high - low + 1 selected exactly the rows low..high (a
token never selects a row twice, the union contract). When every token of the group did, all from one lowest row L
(tokens with no valid slot aside), each selected its causal prefix in a sequence starting at row L: the union is
L..max(high) and token i owns the rows up to its own high, written directly, nothing scattered (the prefix guard:
every token t < topk of a causal prefill, every sequence of a batch in one pool). Otherwise the tokens OR their bit
into marks[row] one token after the other (a CTA barrier between tokens: one token's rows are distinct, so no two
lanes write one byte), and one scan over marks[low:high + 1] compacts the marked rows (ascending) with their bits
and clears them, so the row is all zero again for the program's next group (zeroed once at the start of the kernel).
O(G * topk + span) per group, no host sync; the table lives only inside the call that allocated it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from glmcheck.kernels.device_helpers import append_rows

INT32_MAX = tl.constexpr(2**31 - 1)


@triton.jit
def _token_rows(idx_ptr, length_ptr, token, start, topk, num_kv_rows, stride_it, stride_is,
                HAS_LENGTH: tl.constexpr, BLOCK: tl.constexpr):
    """Rows of slots start..start + BLOCK of `token` and their validity (in bounds, in [0, num_kv_rows), below
    topk_length[token] when HAS_LENGTH)."""
    slot = start + tl.arange(0, BLOCK)
    in_row = slot < topk
    row = tl.load(idx_ptr + token * stride_it + slot * stride_is, mask=in_row, other=-1)
    valid = in_row & (row >= 0) & (row < num_kv_rows)
    if HAS_LENGTH:
        valid = valid & (slot < tl.load(length_ptr + token))
    return row, valid


@triton.jit
def _group_rows(idx_ptr, length_ptr, first_token, members, member_ok, start, topk, num_kv_rows, stride_it,
                stride_is, HAS_LENGTH: tl.constexpr, BLOCK: tl.constexpr):
    """Rows [G_POW2, BLOCK] of slots start..start + BLOCK of the group's tokens first_token + members, and their
    validity (`_token_rows` for every member at once; members past G, member_ok False, have none)."""
    slot = start + tl.arange(0, BLOCK)
    token = first_token + members
    in_row = member_ok[:, None] & (slot < topk)[None, :]
    row = tl.load(idx_ptr + token[:, None] * stride_it + slot[None, :] * stride_is, mask=in_row, other=-1)
    valid = in_row & (row >= 0) & (row < num_kv_rows)
    if HAS_LENGTH:
        valid = valid & (slot[None, :] < tl.load(length_ptr + token, mask=member_ok, other=0)[:, None])
    return row, valid


# Not specialised on the group count, the rows' capacity and pitches: they follow the prompt length (a compiled
# variant per length class otherwise) and their divisibility changes no instruction at real shapes (the sm_90
# PTX with and without it is identical at top-k 2048: docs/performance.md, "Time to verdict"). topk, the index
# stride and num_kv_rows stay specialised: their divisibility by 16 makes the index loads 16-byte vectors.
@triton.jit(do_not_specialize=["num_groups", "width", "stride_rg", "stride_bg"])
def union_marks_kernel(
    idx_ptr, length_ptr, marks_ptr, rows_ptr, bits_ptr, len_ptr,
    num_groups, num_kv_rows, topk, width, stride_it, stride_is, stride_mp, stride_rg, stride_bg,
    G: tl.constexpr, G_POW2: tl.constexpr, HAS_LENGTH: tl.constexpr, BLOCK: tl.constexpr,
):
    """Grid (programs,). idx [T, topk] int32 (any strides), topk_length [T] int32 when HAS_LENGTH, marks
    [programs, >= num_kv_rows] uint8 scratch (any contents). Writes rows[g, :n] (each distinct valid row once,
    ascending), bits[g, :n] (bit i: token g*G + i selected it) and len[g] = n for every g < num_groups; width is
    the rows' capacity per group (G * topk); G_POW2 = next_power_of_2(G); BLOCK slots (of each token) or table
    bytes per step."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    members = tl.arange(0, G_POW2)
    member_ok = members < G
    marks = marks_ptr + pid.to(tl.int64) * stride_mp
    for start in range(0, num_kv_rows, BLOCK):
        pos = start + lanes
        tl.store(marks + pos, tl.zeros([BLOCK], dtype=tl.uint8), mask=pos < num_kv_rows)
    tl.debug_barrier()

    turns = (num_groups - pid + programs - 1) // programs
    for turn in range(turns):
        group = pid.to(tl.int64) + turn * programs
        first_token = group * G
        out_rows = rows_ptr + group * stride_rg
        out_bits = bits_ptr + group * stride_bg
        counts = tl.zeros([G_POW2], dtype=tl.int32)
        lows = tl.full([G_POW2], INT32_MAX, dtype=tl.int32)
        highs = tl.full([G_POW2], -1, dtype=tl.int32)  # per token: highest valid row, -1 when none
        for start in range(0, topk, BLOCK):
            row, valid = _group_rows(idx_ptr, length_ptr, first_token, members, member_ok, start, topk,
                                     num_kv_rows, stride_it, stride_is, HAS_LENGTH, BLOCK)
            counts += tl.sum(valid.to(tl.int32), axis=1)
            lows = tl.minimum(lows, tl.min(tl.where(valid, row, INT32_MAX), axis=1))
            highs = tl.maximum(highs, tl.max(tl.where(valid, row, -1), axis=1))
        is_range = (counts == 0) | (counts == highs - lows + 1)  # distinct rows: exactly low..high
        all_ranges = tl.min(is_range.to(tl.int32), axis=0)
        low = tl.min(lows, axis=0)  # lowest valid row of the group
        top_low = tl.max(tl.where(counts > 0, lows, -1), axis=0)  # highest lowest row of a token with a valid row
        high = tl.max(highs, axis=0)

        if (all_ranges != 0) & ((high < 0) | (low == top_low)):  # prefixes from one row: union low..high
            for start in range(low, high + 1, BLOCK):
                row = start + lanes
                live = row <= high
                owners = tl.sum(tl.where(row[:, None] <= highs[None, :], 1 << members[None, :], 0), axis=1)
                tl.store(out_rows + (row - low), row, mask=live)
                tl.store(out_bits + (row - low), owners.to(tl.uint8), mask=live)
            tl.store(len_ptr + group, tl.where(high < 0, 0, high - low + 1))
        else:
            for member in tl.static_range(G):
                for start in range(0, topk, BLOCK):
                    row, valid = _token_rows(idx_ptr, length_ptr, first_token + member, start, topk, num_kv_rows,
                                             stride_it, stride_is, HAS_LENGTH, BLOCK)
                    if member == 0:
                        tl.store(marks + row, tl.full([BLOCK], 1, dtype=tl.uint8), mask=valid)
                    else:
                        seen = tl.load(marks + row, mask=valid, other=0)
                        tl.store(marks + row, seen | (1 << member), mask=valid)
                tl.debug_barrier()  # the next token reads what this one wrote
            emitted = tl.zeros([], dtype=tl.int32)
            for start in range(low, high + 1, BLOCK):
                row = start + lanes
                span = row <= high
                owners = tl.load(marks + row, mask=span, other=0)
                marked = owners != 0
                emitted = append_rows(out_rows, out_bits, emitted, marked, row, owners, width)
                tl.store(marks + row, tl.zeros([BLOCK], dtype=tl.uint8), mask=marked)
            tl.store(len_ptr + group, emitted)
        tl.debug_barrier()  # the next group's marks start from this group's cleared row
