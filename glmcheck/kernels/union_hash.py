"""Triton kernel of the hash union build (no sort at all). Not yet measured on a GPU.

A persistent grid: each program owns one open-addressing table of TABLE slots (a power of two at
least twice the group's G*topk slots, so it is never more than half full) in a call-scoped
scratch buffer, and walks the groups pid, pid + P, ... For one group it inserts every valid
selected row with an atomic compare-and-swap (linear probing; two lanes inserting the same row
meet in one slot), ORs the token's bit into that slot's ownership word, then scans the table,
compacts the occupied slots by a prefix sum into the group's output and clears the table for the
next group. Rows come out in hash order. Nothing depends on the KV span S.

Launchers live in `glmcheck.kernels.union`; this file holds device code only.
"""

from __future__ import annotations

import triton
import triton.language as tl

from glmcheck.kernels.device_helpers import append_rows, load_group_slots

EMPTY_SLOT = tl.constexpr(-1)  # a free table slot (rows are >= 0)
NEVER = tl.constexpr(-2)  # compare value no slot ever holds: a finished lane's CAS writes nothing
GOLDEN = tl.constexpr(2654435761)  # Knuth's multiplicative hash constant (2^32 / phi)


@triton.jit
def union_hash_kernel(
    idx_ptr, length_ptr, table_ptr, owners_ptr, rows_ptr, bits_ptr, len_ptr,
    num_groups, num_kv_rows, topk, stride_it, stride_is, stride_rg, stride_bg,
    G: tl.constexpr, HAS_LENGTH: tl.constexpr, TABLE: tl.constexpr, LOG2_TABLE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Grid (P,). table [P, TABLE] int32 all EMPTY_SLOT and owners [P, TABLE] int32 all 0 on entry
    (and again on exit). Writes rows[g, :n], bits[g, :n] (uint8) and len[g] = n for every group."""
    pid = tl.program_id(0)
    table = table_ptr + tl.cast(pid, tl.int64) * TABLE
    owners = owners_ptr + tl.cast(pid, tl.int64) * TABLE
    lanes = tl.arange(0, BLOCK)
    width = G * topk
    for group in range(pid, num_groups, tl.num_programs(0)):
        group64 = tl.cast(group, tl.int64)
        for start in range(0, width, BLOCK):
            row, member, valid = load_group_slots(idx_ptr, length_ptr, group64, start + lanes, width,
                                                  topk, num_kv_rows, stride_it, stride_is, G, HAS_LENGTH)
            spot = ((row.to(tl.uint32) * GOLDEN) >> (32 - LOG2_TABLE)).to(tl.int32)
            done = ~valid
            placed = valid
            probes = 0
            while (tl.sum((~done).to(tl.int32), axis=0) > 0) & (probes < TABLE):  # bounded: never hangs
                old = tl.atomic_cas(table + spot, tl.where(done, NEVER, EMPTY_SLOT), tl.where(done, NEVER, row))
                done = done | (old == EMPTY_SLOT) | (old == row)
                spot = tl.where(done, spot, (spot + 1) & (TABLE - 1))
                probes += 1
            placed = placed & done  # always all valid lanes: the table is at most half full
            tl.atomic_or(owners + spot, 1 << member, mask=placed)
        tl.debug_barrier()
        out_rows = rows_ptr + group64 * stride_rg
        out_bits = bits_ptr + group64 * stride_bg
        emitted = tl.zeros([], dtype=tl.int32)
        for start in range(0, TABLE, BLOCK):
            cell = start + lanes
            row = tl.load(table + cell, cache_modifier=".cg")  # written by atomics: skip L1
            bits = tl.load(owners + cell, cache_modifier=".cg")
            live = row != EMPTY_SLOT
            # the width limit never binds for a correct table; it keeps a broken one in bounds
            emitted = append_rows(out_rows, out_bits, emitted, live, row, bits, width)
            tl.store(table + cell, tl.full([BLOCK], EMPTY_SLOT, tl.int32), mask=live)
            tl.store(owners + cell, tl.zeros([BLOCK], dtype=tl.int32), mask=live)
        tl.store(len_ptr + group, tl.minimum(emitted, width))
        tl.debug_barrier()
