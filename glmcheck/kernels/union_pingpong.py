"""Gluon kernel (Hopper only): the 64-row union tile with two ping-pong consumer warpgroups.

Same contract and result as `union_ws.sparse_mla_union_ws_kernel` (one group of G adjacent tokens
per program, G*H = 64 token-major query rows, ownership bits mask foreign rows), but the two
consumer warpgroups split the work by KV block instead of by column (docs/performance.md, notes 42-45):
  * the even warpgroup takes union blocks 0, 2, 4, ..., the odd one blocks 1, 3, 5, ...; each
    computes its own block's full S = Q K^T ([64, 64]: one 64-wide warpgroup MMA instead of two
    32-wide halves, which read Q from shared memory twice per column) and its softmax;
  * both own half of the output columns (fp32 accumulator [64, 256] each), so each block's P
    goes to both: its owner keeps P in registers and stores it (bf16) for the other warpgroup's
    MMA: the even one in its block's rope-tail buffer (nothing reads it once S is done), the odd
    one in a buffer of its own;
  * one running row max M: block b's max is max(M after block b-1, rowmax S_b), so the
    warpgroups pass M through shared memory, one after the other. While one runs its softmax,
    the other's MMAs keep the tensor cores busy (ping-pong). Each max is handed over alone, as
    soon as its softmax is done; the P blocks are exchanged after both maxima are known, both
    against the pair's max M1 (the even warpgroup moves its P0, kept in registers, from M0 to M1;
    its own O += P0 V0 has used it against M0 already). This is FlashMLA's order of the handoffs
    (GPU run 18, docs/performance.md note 65: 1.01-1.03x at H = 64 and union 8 over passing M0 with P0);
  * block b lands in stage b % 2 in pieces, each with a barrier pair and a single last reader, and
    each piece is refilled as soon as that reader is done: L = columns [0, 256), read last by the
    even warpgroup's O += P V; R = columns [256, 512), read last by the odd one's; the rope tail,
    with R in stage 0 (where P0 then lives, read last by the odd warpgroup's O += P0 V0) and a
    piece of its own (T) in stage 1, read only by S1. Each warpgroup starts S on the piece the
    producer fills first for it. A block count that is odd gets one more block that is all masked.
Per block pair, with phase = pair % 2 on every barrier (pieces 0L 0R 1L 1R 1T; max[w] carries
warpgroup w's max, pub[w] its P):
  even: S0 on 0R (its left half, on 0L, was issued in the previous pair; the first pair's before the
        loop); softmax with M_prev; publish M0 (max[0]); O *= alpha; O += P0 V0[:, :256] from
        registers; wait for it (release 0L); wait max[1]; P0 *= 2^(M0 - M1), stored in stage 0's
        tail (pub[0]); O *= 2^(M0 - M1); wait pub[1]; O += P1 V1[:, :256]; the next pair's S0 on 0L
        once refilled (none in the last pair); wait for O += P1 V1 (release 1L), then for that left half
  odd:  S1 on 1R, 1T, then 1L; wait for it (release 1T); wait max[0]; softmax with M0; publish M1
        (max[1]); O *= alpha; O += P1 V1[:, 256:] from registers; store P1; wait pub[0];
        O += P0 V0[:, 256:]; publish P1 (pub[1]); wait for O += P1 V1 (release 1R), then for
        O += P0 V0 (release 0R)
  producer: 0L 1T 1R 0R 1L, the order the pieces are freed in (GPU run 19: 1.01x over 0L 0R 1T 1R 1L,
        whose 0R, freed by the odd warpgroup's last MMA, held up 1T and 1R for the odd one's S1).
GPU run 13 (docs/performance.md, notes 46-48) measured the piece order of that time against run
12's (0L freed only after the odd warpgroup's max, 0R after S1, the tail with 1R: 1.03x slower at
H = 64) and against the odd warpgroup computing all of S1 before it waits for M0 (1.02x slower).
GPU run 18 (note 65) measured the current handoffs against the previous ones: 1.01-1.03x; with the
handoffs on hardware named barriers (bar.arrive / bar.sync), with each max published before the
exp2 pass, or with P1 published before the wait for P0: no faster (1.00x, 1.00x, 0.99x); the
producer filling 0R after 1R (its offsets held longer: ptxas spilled 21-24 loads a pair at 56
registers): 0.94-0.97x. GPU run 19 (note 68): the gathers spread each row over 8 threads instead of
16 (MAIN_GATHER), so each producer thread holds 4 rows of a block instead of 8: its pair loop
shrank from 487 to 225 instructions, 1.09x at H = 64 and 1.07x at union 8; with that, the order
above no longer spills and adds 1.01x.
tests/pingpong_protocol.py models this protocol (waits, arrives, buffer reads and writes) and
checks it for races under random interleavings on the CPU: change the two together.
Each warpgroup's row sums cover its own blocks; they are added through shared memory at the end.
Each partition's pair is a helper (`_even_scores_rest`/`_even_blocks`, `_odd_scores`/`_odd_blocks`,
`_fill_pair`). GPU run 14 (docs/performance.md, note 54) measured and removed two more variants: a
persistent form (one program per SM walking the groups: 0.99x at H = 64, 0.79-0.97x at union 8)
and the even warpgroup loading its next ownership bits right after its publish (0.99-1.00x).
GPU run 15 (notes 57-58): at G = 1 the bits are the live mask, not loaded (1.05x at H = 64); with
free gathers (DIAG_COMPUTE_ONLY) the tile still takes 0.81 of its time, so the consumers' chain
of softmaxes and max/P handoffs bounds it; two reorders of that chain (the odd warpgroup waiting
for M0 first, the even one issuing its next S0 behind O += P1 V1) measured 0.97x and 0.98x, and
a chain-free form (both softmaxes against the previous pair's max, the maxima exchanged once per
pair) 0.90x: the warpgroups then run in step and lose the ping-pong overlap. GPU run 16 (note 59):
the odd warpgroup indexes Q and the stages with a zero the compiler cannot see through
(`_first_stage`), so ptxas builds its wgmma descriptors in the loop instead of spilling them
(1.05x at H = 64, 1.11x at union 8); the even warpgroup then issues the next pair's S0 left half
in its pair, not in the next one's: during its wait for the odd warpgroup's max (1.11x at H = 64,
1.02x at union 8; run 14 had measured it 0.94x while ptxas spilled the even warpgroup's
descriptors, 86 loads a pair), and then, as the trace showed that wait on the 0L refill making the
even warpgroup take the odd one's max ~570 cycles late, behind O += P1 V1 (1.02x at H = 64 and at
union 8). Measured and removed in run 16: the rest of S0 behind O += P1 V1 as well (1.00x), the
odd warpgroup taking M0 before S1 (1.00x at H = 64, 0.96x at union 8) or after S1's tail (1.01x,
0.97x), 216 consumer registers (0.98x). GPU run 17 (notes 62-63): the producer loads the first
pair's row numbers alongside the group's length (1.02x at H = 64); a persistent form (one program
per SM walking the groups, Q copied per group by the producer or by the even warpgroup) measured
0.93x and 0.89x at H = 64 and was removed, as was Q's copy after the barrier-init fence (1.00x).

Needs triton.experimental.gluon as in triton 3.6 and an sm_90 GPU; the CPU interpreter does not
run Gluon. Launcher: `glmcheck.kernels.union_ws_launch` (`WsConfig.tile_for` picks this tile for
union 8 and for the per-token path from 17 heads, one-token groups run per 64-head slice).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from glmcheck.kernels.union_ws import _group_index

BLOCK_M = gl.constexpr(64)  # query rows per program: one warpgroup MMA tile (G * H)
WARPGROUP_WARPS = gl.constexpr(4)  # each partition is one warpgroup (the launch's num_warps)
LEFT = gl.constexpr(0)  # half index: main columns [0, D_HALF)
RIGHT = gl.constexpr(1)  # half index: main columns [D_HALF, D_V) and the rope tail
ODD_TAIL = gl.constexpr(4)  # barrier index of stage 1's rope tail, a piece of its own
NUM_PIECES = gl.constexpr(5)  # barrier pairs: [stage * 2 + half], then ODD_TAIL

# One consumer warpgroup's register layouts, for the only shape this tile takes (the kernel asserts
# BLOCK_N = 64 and D_V = 512): S [64, 64], O [64, 256] (its half of the columns), P as the A operand
# of O += P V, and one value per query row.
D_HALF = gl.constexpr(256)
S_LAYOUT = gl.constexpr(gl.NVMMADistributedLayout([3, 0], [4, 1], [16, 64, 16]))
O_LAYOUT = gl.constexpr(gl.NVMMADistributedLayout([3, 0], [4, 1], [16, 256, 16]))
P_LAYOUT = gl.constexpr(gl.DotOperandLayout(0, O_LAYOUT, 2))
ROW_LAYOUT = gl.constexpr(gl.SliceLayout(1, S_LAYOUT))
# Gathers (KV halves, rope tails and Q): 8 threads per row, 16 bytes each (a 128-byte line per warp row), so a
# thread holds 4 of a block's 64 rows. With 16 threads per row (8 rows a thread) the producer's
# pair loop took 487 instructions against 225 (row offsets and 64-bit addresses for twice the rows
# at 56 registers): GPU run 19, 1.09x at H = 64 and 1.07x at union 8 (docs/performance.md note 68).
MAIN_GATHER = gl.constexpr(gl.BlockedLayout([1, 8], [4, 8], [WARPGROUP_WARPS, 1], [1, 0]))
# DIAG (diagnostic only; the launchers never set it): what the kernel does besides the barrier
# protocol. NONE is the kernel. GATHER_ONLY: the consumers only wait for each piece they release and
# release it (no MMA, no softmax; the output is the zero tile), so the time is the producer's pace
# with two stages. COMPUTE_ONLY: the producer gathers the first pair only and then just arrives, so
# every later pair computes on the first pair's (real) rows and the time is the consumers' pace
# with free gathers. scripts/pingpong_ceiling.py times the three.
DIAG_NONE, DIAG_GATHER_ONLY, DIAG_COMPUTE_ONLY = gl.constexpr(0), gl.constexpr(1), gl.constexpr(2)


@gluon.jit
def _tile_index(LONGEST_FIRST: gl.constexpr, HEAD_SLICES: gl.constexpr):
    """(union group, first head) of this program's tile. With HEAD_SLICES > 1 (G = 1, more than 64
    heads) program p takes the 64 heads from BLOCK_M * (p % HEAD_SLICES) of token p // HEAD_SLICES:
    a token's slices are neighbours in launch order, so they run side by side and the later ones
    read its gathered KV rows from L2. LONGEST_FIRST reverses the program order (`_group_index`)."""
    program = _group_index(LONGEST_FIRST)
    if HEAD_SLICES == 1:
        group = program
        head0 = gl.program_id(0) * 0  # int32 0: head offsets stay 32-bit, as without slices
    else:
        group = program // HEAD_SLICES
        head0 = (program % HEAD_SLICES).to(gl.int32) * BLOCK_M
    return group, head0


@gluon.jit
def _half(stage: gl.constexpr, half: gl.constexpr):
    """Index of a stage half in the barrier arrays [NUM_PIECES, 1]."""
    return stage * 2 + half


@gluon.jit
def _first_stage(length, pair):
    """Index 0 of stage 0 (and of Q) for a consumer warpgroup's buffer views in one pair, computed
    from values the compiler cannot bound: (length + pair) >> 31 is 0, as both are non-negative and
    their sum stays far below 2**31. Views indexed by it are not loop-invariant, so their wgmma
    descriptors are built in the pair (one add each) instead of hoisted out of the loop: the ~40
    hoisted 64-bit descriptors of the odd warpgroup's S and O += P V did not fit its registers,
    and ptxas spilled them (38 local loads per pair at H = 64, 61 at union 8) and reloaded them
    between the MMAs it issues. GPU run 16: 1.05x at H = 64, 1.11x at union 8 (note 59). The even
    warpgroup's loop uses it too since it carries the next S0 left half (note 60)."""
    return (length + pair) >> 31


@gluon.jit
def _wait_piece(full_bars, index: gl.constexpr, phase):
    """Wait until the stage piece with barrier `index` has landed (this pair's phase)."""
    mbarrier.wait(full_bars.index(index), phase)
    fence_async_shared()  # cp.async wrote through the generic proxy; wgmma reads through the async one


@gluon.jit
def _wait_half(full_bars, stage: gl.constexpr, half: gl.constexpr, phase):
    """Wait until a stage half has landed (this pair's phase)."""
    _wait_piece(full_bars, _half(stage, half), phase)


@gluon.jit
def _scores_left(q_main, main_buf, acc, use_acc: gl.constexpr):
    """acc (+)= Q[:, :256] K[:, :256]^T, async."""
    return warpgroup_mma(q_main.slice(0, D_HALF, dim=1), main_buf.slice(0, D_HALF, dim=1).permute((1, 0)), acc,
                         use_acc=use_acc, is_async=True)


@gluon.jit
def _scores_right_main(q_main, main_buf, acc, use_acc: gl.constexpr):
    """acc (+)= Q[:, 256:512] K[:, 256:512]^T, async."""
    return warpgroup_mma(q_main.slice(D_HALF, D_HALF, dim=1), main_buf.slice(D_HALF, D_HALF, dim=1).permute((1, 0)),
                         acc, use_acc=use_acc, is_async=True)


@gluon.jit
def _scores_tail(q_tail, tail_buf, acc):
    """acc += Q_tail K_tail^T, async."""
    return warpgroup_mma(q_tail, tail_buf.permute((1, 0)), acc, is_async=True)


@gluon.jit
def _scores_right(q_main, q_tail, main_buf, tail_buf, acc, use_acc: gl.constexpr):
    """acc (+)= Q[:, 256:512] K[:, 256:512]^T + Q_tail K_tail^T, async."""
    return _scores_tail(q_tail, tail_buf, _scores_right_main(q_main, main_buf, acc, use_acc))


@gluon.jit
def _load_bits(union_bits, block, length, G: gl.constexpr, BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
    """Ownership bits of one block's union rows (uint8 [BLOCK_N], 0 past `length`). Loaded a pair
    ahead: a load used at once stalled the warpgroup for ~1700 cycles before its barrier wait. A
    load still in flight also stalls the next `fence_async_shared`: ptxas emits MEMBAR.ALL.CTA for
    it, which waits for the thread's outstanding loads (note 53; loading them right after the
    publish instead measured no faster, note 54). At G = 1 nothing is loaded: every bit of a
    one-token group is its live mask (dropping the load measured 1.05x at H = 64, note 57)."""
    offs_n = block * BLOCK_N + gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
    if G == 1:  # the group's one token owns every live row: the bits are the live mask
        return (offs_n < length).to(gl.uint8)
    return gl.load(union_bits + offs_n, mask=offs_n < length, other=0)


@gluon.jit
def _owned(bits, H: gl.constexpr, s_layout: gl.constexpr):
    """[64, BLOCK_N] mask: the query row's token owns the union row. Every live union row has an
    owner, and rows past the length have no bits, so this is also the live mask."""
    member = gl.arange(0, BLOCK_M, gl.SliceLayout(1, s_layout)) // H
    return ((bits.to(gl.int32)[None, :] >> member[:, None]) & 1) != 0


TRACE_PAIRS = gl.constexpr(16)  # diagnostic trace: the first pairs of each program
TRACE_EVENTS = gl.constexpr(6)  # full, scores, published, peer seen, first PV done, pair done
TRACE_SLOTS = gl.constexpr(17)  # the pairs, then one slot of program events (ENTRY_CLOCK ... SM_ID)
TRACE_EVENTS_SMEM = gl.constexpr(8)  # a pair's events in shared memory (a power of two >= TRACE_EVENTS)
# Program slot, warpgroup 0's row: entry %clock64, entry %globaltimer (ns), exit %clock64, exit
# %globaltimer, %smid; warpgroup 1's row: its exit %clock64 and %globaltimer (events 2, 3).
ENTRY_CLOCK, ENTRY_NS, EXIT_CLOCK, EXIT_NS, SM_ID = 0, 1, 2, 3, 4


@gluon.jit
def _special_register(which: gl.constexpr):
    """[1] int64 in a one-warpgroup layout: %clock64 (which = 0), %globaltimer (1) or %smid (2)."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    offs = gl.arange(0, 1, layout)
    if which == 0:
        return gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [offs], dtype=gl.int64, is_pure=False,
                                         pack=1)
    elif which == 1:
        return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [offs], dtype=gl.int64,
                                         is_pure=False, pack=1)
    else:
        return gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [offs], dtype=gl.int32, is_pure=False,
                                         pack=1).to(gl.int64)


@gluon.jit
def _slot_base(trace_ptr, row, warpgroup: gl.constexpr):
    """trace[row, warpgroup] (int64 [TRACE_SLOTS, TRACE_EVENTS]); row is the union group."""
    return trace_ptr + (row.to(gl.int64) * 2 + warpgroup) * TRACE_SLOTS * TRACE_EVENTS


@gluon.jit
def _allocate_stamps(TRACE: gl.constexpr):
    """Diagnostic: shared memory for the pair stamps, int32 [2 warpgroups x TRACE_PAIRS,
    TRACE_EVENTS_SMEM] (the low 32 bits of %clock64); without TRACE one unused row, which the
    compiler drops (Triton 3.6 neither returns None from a Gluon function nor takes it as a
    partition argument). Stamps go to shared memory, not global, because every
    fence_async_shared is a MEMBAR.ALL.CTA that waits for the thread's stores in flight: a global
    store per stamp would slow the very waits it times."""
    rows: gl.constexpr = 2 * TRACE_PAIRS if TRACE else 1
    return gl.allocate_shared_memory(gl.int32, [rows, TRACE_EVENTS_SMEM], gl.SwizzledSharedLayout(1, 1, 1, [0]))


@gluon.jit
def _stamp(stamps, warpgroup: gl.constexpr, pair, event: gl.constexpr, TRACE: gl.constexpr):
    """Diagnostic: the low 32 bits of %clock64 into stamps[warpgroup * TRACE_PAIRS + pair, event]
    for the first TRACE_PAIRS pairs of a group (`_flush_stamps` writes them out); nothing without TRACE."""
    if TRACE and pair < TRACE_PAIRS:
        stamps.index(warpgroup * TRACE_PAIRS + pair).slice(event, 1).store(_special_register(0).to(gl.int32))


@gluon.jit
def _flush_stamps(stamps, trace_ptr, row, warpgroup: gl.constexpr, num_pairs, TRACE: gl.constexpr):
    """Diagnostic: a warpgroup's pair stamps of one group (its first min(num_pairs, TRACE_PAIRS)
    pairs) into trace[row, warpgroup, pair, event], int32 widened to int64; nothing without TRACE."""
    if TRACE:
        layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        events = gl.arange(0, TRACE_EVENTS_SMEM, layout)
        base = _slot_base(trace_ptr, row, warpgroup)
        gl.thread_barrier()  # every stamp of the group is in shared memory
        for pair in gl.static_range(TRACE_PAIRS):
            values = stamps.index(warpgroup * TRACE_PAIRS + pair).load(layout)
            gl.store(base + pair * TRACE_EVENTS + events, values.to(gl.int64),
                     mask=(events < TRACE_EVENTS) & (pair < num_pairs))
        gl.thread_barrier()  # read before the next group's stamps overwrite them


@gluon.jit
def _stamp_program(trace_ptr, row, warpgroup: gl.constexpr, event: gl.constexpr, which: gl.constexpr,
                   TRACE: gl.constexpr):
    """Diagnostic: a special register (`_special_register`) into trace[row, warpgroup,
    TRACE_PAIRS, event]; nothing without TRACE."""
    if TRACE:
        value = _special_register(which)
        offs = gl.arange(0, 1, value.type.layout)
        gl.store(_slot_base(trace_ptr, row, warpgroup) + TRACE_PAIRS * TRACE_EVENTS + event + offs, value)


@gluon.jit
def _shift(row_max):
    """The row max a block's P is taken against: 0 where nothing is live yet (-inf)."""
    return gl.where(row_max == float("-inf"), 0.0, row_max)


@gluon.jit
def _alpha(max_from, max_to):
    """Per-row factor that moves values taken against the max `max_from` to the (larger) max
    `max_to` (0 where nothing is live yet, `_shift`)."""
    return gl.exp2(max_from - _shift(max_to))


@gluon.jit
def _rescale(acc, row_sum, max_from, max_to, o_layout: gl.constexpr):
    """Move O and the row sums from the max `max_from` to the (larger) max `max_to`."""
    alpha = _alpha(max_from, max_to)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    return acc, row_sum * alpha


@gluon.jit
def _publish_max(row_max, max_buf, bar):
    """Hand this block's running max to the other warpgroup (read by ld.shared: no proxy fence)."""
    max_buf.store(row_max)
    gl.thread_barrier()  # every thread's store is done before the single arrive
    mbarrier.arrive(bar)


@gluon.jit
def _publish_p(p, p_buf, bar):
    """Hand a block's P (bf16 [64, BLOCK_N]) to the other warpgroup, whose wgmma reads it."""
    p_buf.store(p)
    _signal_p(bar)


@gluon.jit
def _signal_p(bar):
    """Arrive on `bar` once this warpgroup's P stores are visible to the peer's wgmma."""
    fence_async_shared()  # P is read by the peer's wgmma (async proxy)
    gl.thread_barrier()  # every thread's stores are done before the single arrive
    mbarrier.arrive(bar)


@gluon.jit
def _store_half(out, out_ptr, group, head0, num_heads, col0, stride_ot, stride_oh, stride_od, H: gl.constexpr,
                G: gl.constexpr, PARTIAL_HEADS: gl.constexpr, o_layout: gl.constexpr):
    """Store a warpgroup's half of the output tile (bf16 [64, D_HALF], columns from col0) for the
    group's G tokens, heads from head0 (`_tile_index`); PARTIAL_HEADS: rows of heads at or past
    num_heads are padding and not stored."""
    offs_m = gl.arange(0, BLOCK_M, gl.SliceLayout(1, o_layout))
    token = group * G + offs_m // H
    head = head0 + offs_m % H
    offs_d = col0 + gl.arange(0, D_HALF, gl.SliceLayout(0, o_layout))
    ptrs = out_ptr + token[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :] * stride_od
    if PARTIAL_HEADS:
        gl.store(ptrs, out, mask=(head < num_heads)[:, None])
    else:
        gl.store(ptrs, out)


@gluon.jit
def _write_out(acc, row_sum, sum_mine, sum_peer, bar_mine, bar_peer, phase, out_ptr, group, head0, num_heads, col0,
               stride_ot, stride_oh, stride_od, H: gl.constexpr, G: gl.constexpr, PARTIAL_HEADS: gl.constexpr,
               o_layout: gl.constexpr, row_layout: gl.constexpr):
    """Add the peer's row sums to this warpgroup's, normalise its half of O and store it (`phase`:
    of the sum barriers, 0 for a program's only group)."""
    sum_mine.store(row_sum)
    gl.thread_barrier()
    mbarrier.arrive(bar_mine)
    mbarrier.wait(bar_peer, phase)
    total = row_sum + sum_peer.load(row_layout)
    # one reciprocal per row, then a multiply per element: the division per element (div.full.f32)
    # cost ~256 more instructions per thread at the end of every program (GPU run 19, note 69;
    # the same rel-L2 against fp64 to the last digit printed)
    inverse = gl.convert_layout(1.0 / gl.where(total > 0.0, total, 1.0), gl.SliceLayout(1, o_layout))
    out = (acc * inverse[:, None]).to(gl.bfloat16)
    _store_half(out, out_ptr, group, head0, num_heads, col0, stride_ot, stride_oh, stride_od, H, G, PARTIAL_HEADS,
                o_layout)


@gluon.jit
def _consumer_start(bits_ptr, len_ptr, stride_bg, group, first_block, G: gl.constexpr, BLOCK_N: gl.constexpr):
    """A consumer's (union length, its bits row, running max, row sums, O half, bits of its first
    block) for one union group."""
    length = gl.load(len_ptr + group)
    union_bits = bits_ptr + group * stride_bg
    run_max = gl.full([BLOCK_M], float("-inf"), gl.float32, ROW_LAYOUT)
    row_sum = gl.zeros([BLOCK_M], gl.float32, ROW_LAYOUT)
    acc = gl.zeros([BLOCK_M, D_HALF], gl.float32, O_LAYOUT)
    bits = _load_bits(union_bits, first_block, length, G, BLOCK_N, S_LAYOUT)
    return length, union_bits, run_max, row_sum, acc, bits


@gluon.jit
def _softmax_block(scores, bits, prev_max, qk_scale_log2, H: gl.constexpr):
    """(new running max, P in fp32) of one block's scores: foreign and dead rows masked, P taken
    against the new max (`_shift`). GPU run 19 (note 69) measured the scale fused into P's
    exponent instead, exp2(s * scale - max) as one FMA (FlashMLA's form; 30 instructions less
    per pair and warpgroup): 1.006-1.015x, but its rel-L2 against fp64 at H = 64, 1 x 8192 was
    8.4e-10 above FlashMLA's where this form's is 1.1e-9 below; the accuracy bar comes first."""
    logits = gl.where(_owned(bits, H, S_LAYOUT), scores * qk_scale_log2, float("-inf"))
    new_max = gl.maximum(prev_max, gl.max(logits, 1))
    return new_max, gl.exp2(logits - _shift(new_max)[:, None])


@gluon.jit
def _even_scores_left(q_main, main_bufs, full_bars, zero_s, stage0, phase):
    """Issue the even warpgroup's S0 left half, Q[:, :256] K0[:, :256]^T (async, not waited for),
    once 0L of this `phase` has landed (before the loop, and in each pair for the next). stage0:
    `_first_stage`."""
    _wait_half(full_bars, 0, LEFT, phase)
    return _scores_left(q_main, main_bufs.index(stage0), zero_s, False)


@gluon.jit
def _even_scores_rest(q_main, q_tail, main_bufs, tail_bufs, full_bars, scores, stage0, phase, stamps, pair,
                      TRACE: gl.constexpr):
    """The even warpgroup's S0 (fp32 [64, 64]) from its finished left half `scores`: the right half
    and the rope tail once 0R has landed, waited for. Trace event 0 is 0R's wait here."""
    _wait_half(full_bars, 0, RIGHT, phase)
    _stamp(stamps, 0, pair, 0, TRACE)
    scores = _scores_right(q_main, q_tail, main_bufs.index(stage0), tail_bufs.index(stage0), scores, True)
    scores = warpgroup_mma_wait(0, deps=(scores,))
    _stamp(stamps, 0, pair, 1, TRACE)
    return scores


@gluon.jit
def _even_blocks(scores, bits, acc, row_sum, run_max, main_bufs, tail_bufs, odd_p, empty_bars, pub_bars, max_bars,
                 max_bufs, qk_scale_log2, phase, union_bits, length, stamps, pair, H: gl.constexpr,
                 G: gl.constexpr, BLOCK_N: gl.constexpr, TRACE: gl.constexpr, zero_s, q_main, full_bars, stage0,
                 NEXT_LEFT: gl.constexpr):
    """The rest of the even warpgroup's pair: softmax of S0 and its max M0 published alone;
    O += P0 V0[:, :256] from registers (free 0L); the odd warpgroup's max M1, the pair's; P0 moved
    to M1 and published for the odd warpgroup; O moved to M1; the odd warpgroup's P1 and
    O += P1 V1[:, :256] (free 1L), with NEXT_LEFT the next pair's S0 left half
    (`_even_scores_left`) behind it. Returns (acc, row_sum, run_max = M1, the ownership bits of the
    warpgroup's next block, loaded at the end: see `_load_bits`; that left half, or zero_s without
    NEXT_LEFT). stage0: `_first_stage`."""
    new_max, p = _softmax_block(scores, bits, run_max, qk_scale_log2, H)
    _publish_max(new_max, max_bufs.index(0), max_bars.index(0))
    _stamp(stamps, 0, pair, 2, TRACE)
    acc, row_sum = _rescale(acc, row_sum, run_max, new_max, O_LAYOUT)
    row_sum += gl.sum(p, 1)
    acc = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), P_LAYOUT),
                        main_bufs.index(stage0).slice(0, D_HALF, dim=1), acc, is_async=True)
    # 0L's last read is this O += P0 V0: free it before waiting on the odd warpgroup
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index(_half(0, LEFT)))
    _stamp(stamps, 0, pair, 4, TRACE)
    mbarrier.wait(max_bars.index(1), phase)
    pair_max = max_bufs.index(1).load(ROW_LAYOUT)
    _stamp(stamps, 0, pair, 3, TRACE)
    # P0 in the rope-tail buffer of stage 0 (S0, its only other reader, is done)
    _publish_p((p * _alpha(new_max, pair_max)[:, None]).to(gl.bfloat16), tail_bufs.index(stage0), pub_bars.index(0))
    acc, row_sum = _rescale(acc, row_sum, new_max, pair_max, O_LAYOUT)
    mbarrier.wait(pub_bars.index(1), phase)
    acc = warpgroup_mma(odd_p, main_bufs.index(stage0 + 1).slice(0, D_HALF, dim=1), acc, is_async=True)
    next_scores = zero_s
    if NEXT_LEFT:
        next_scores = _even_scores_left(q_main, main_bufs, full_bars, zero_s, stage0, phase ^ 1)
        acc = warpgroup_mma_wait(1, deps=(acc,))  # O += P1 V1, the older group: 1L's last read
    else:
        acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index(_half(1, LEFT)))
    _stamp(stamps, 0, pair, 5, TRACE)
    if NEXT_LEFT:
        next_scores = warpgroup_mma_wait(0, deps=(next_scores,))
    bits = _load_bits(union_bits, 2 * pair + 2, length, G, BLOCK_N, S_LAYOUT)
    return acc, row_sum, pair_max, bits, next_scores


@gluon.jit
def _even_pairs(q_main, q_tail, main_bufs, tail_bufs, odd_p, full_bars, empty_bars, pub_bars, max_bars, max_bufs,
                zero_s, acc, row_sum, run_max, bits, union_bits, length, qk_scale_log2, stamps, H: gl.constexpr,
                G: gl.constexpr, BLOCK_N: gl.constexpr, TRACE: gl.constexpr):
    """The even warpgroup's pairs: each pair but the last issues the next pair's S0 left half behind
    its O += P1 V1 (`_even_blocks`); the first pair's is issued here and the last pair runs after
    the loop without one. In the loop, Q and the stages are indexed with `_first_stage`: the left
    half carried across the loop keeps 32 more registers live, and with hoisted descriptors ptxas
    spilled 86 loads a pair here (run 14). Returns (acc, row_sum, run_max)."""
    num_pairs = gl.cdiv(length, 2 * BLOCK_N)
    if num_pairs > 0:
        scores = warpgroup_mma_wait(0, deps=(_even_scores_left(q_main.index(0), main_bufs, full_bars, zero_s, 0, 0),))
        for pair in range(num_pairs - 1):
            phase = pair & 1
            stage0 = _first_stage(length, pair)
            q_view = q_main.index(stage0)
            scores = _even_scores_rest(q_view, q_tail.index(stage0), main_bufs, tail_bufs, full_bars, scores, stage0,
                                       phase, stamps, pair, TRACE)
            acc, row_sum, run_max, bits, scores = _even_blocks(
                scores, bits, acc, row_sum, run_max, main_bufs, tail_bufs, odd_p, empty_bars, pub_bars, max_bars,
                max_bufs, qk_scale_log2, phase, union_bits, length, stamps, pair, H, G, BLOCK_N, TRACE, zero_s,
                q_view, full_bars, stage0, True)
        last = num_pairs - 1
        scores = _even_scores_rest(q_main.index(0), q_tail.index(0), main_bufs, tail_bufs, full_bars, scores, 0,
                                   last & 1, stamps, last, TRACE)
        acc, row_sum, run_max, bits, scores = _even_blocks(
            scores, bits, acc, row_sum, run_max, main_bufs, tail_bufs, odd_p, empty_bars, pub_bars, max_bars,
            max_bufs, qk_scale_log2, last & 1, union_bits, length, stamps, last, H, G, BLOCK_N, TRACE, zero_s,
            q_main.index(0), full_bars, 0, False)
    return acc, row_sum, run_max


@gluon.jit
def _odd_scores(q_main, q_tail, main_bufs, tail_bufs, full_bars, empty_bars, zero_s, phase, stage0, stamps, pair,
                TRACE: gl.constexpr):
    """The odd warpgroup's whole S1 [64, 64] fp32 of one pair (1R, 1T, then 1L), waited for; frees
    1T, read by S1 only. stage0: `_first_stage`; q_main and q_tail are the Q views it indexed."""
    own_main = main_bufs.index(stage0 + 1)
    _wait_half(full_bars, 1, RIGHT, phase)
    _stamp(stamps, 1, pair, 0, TRACE)
    scores = _scores_right_main(q_main, own_main, zero_s, False)
    _wait_piece(full_bars, ODD_TAIL, phase)
    scores = _scores_tail(q_tail, tail_bufs.index(stage0 + 1), scores)
    _wait_half(full_bars, 1, LEFT, phase)
    scores = _scores_left(q_main, own_main, scores, True)
    scores = warpgroup_mma_wait(0, deps=(scores,))
    mbarrier.arrive(empty_bars.index(ODD_TAIL))
    _stamp(stamps, 1, pair, 1, TRACE)
    return scores


@gluon.jit
def _odd_blocks(scores, bits, acc, row_sum, run_max, main_bufs, tail_bufs, odd_p, empty_bars, pub_bars, max_bars,
                max_bufs, qk_scale_log2, union_bits, length, phase, stage0, stamps, pair, H: gl.constexpr,
                G: gl.constexpr, BLOCK_N: gl.constexpr, TRACE: gl.constexpr):
    """The rest of the odd warpgroup's pair: the even warpgroup's max M0; softmax of S1 against it
    and the pair's max M1 published alone; O moved to M1; O += P1 V1[:, 256:] from registers; P1
    stored for the even warpgroup; the even warpgroup's P0 (against M1) and O += P0 V0[:, 256:];
    P1 published; free 1R, then 0R (P0 lives in stage 0's tail, read last here). Returns (acc,
    row_sum, run_max = M1, the ownership bits of the warpgroup's next block, loaded at the end:
    loading them earlier cost spill loads and stores, ptxas at H = 64)."""
    mbarrier.wait(max_bars.index(0), phase)
    peer_max = max_bufs.index(0).load(ROW_LAYOUT)
    _stamp(stamps, 1, pair, 3, TRACE)
    new_max, p = _softmax_block(scores, bits, peer_max, qk_scale_log2, H)
    _publish_max(new_max, max_bufs.index(1), max_bars.index(1))
    _stamp(stamps, 1, pair, 2, TRACE)
    acc, row_sum = _rescale(acc, row_sum, run_max, new_max, O_LAYOUT)
    row_sum += gl.sum(p, 1)
    p_bf16 = p.to(gl.bfloat16)
    acc = warpgroup_mma(gl.convert_layout(p_bf16, P_LAYOUT), main_bufs.index(stage0 + 1).slice(D_HALF, D_HALF, dim=1),
                        acc, is_async=True)
    # odd_p's last reader, the even warpgroup's O += P1 V1 of the previous pair, freed 1L, which
    # this pair's S1 waited for. P1 is published only after O += P0 V0 is queued: published before
    # the wait for P0 instead, it measured 0.99x (run 18).
    odd_p.store(p_bf16)
    mbarrier.wait(pub_bars.index(0), phase)
    acc = warpgroup_mma(tail_bufs.index(stage0), main_bufs.index(stage0).slice(D_HALF, D_HALF, dim=1), acc,
                        is_async=True)
    _signal_p(pub_bars.index(1))
    acc = warpgroup_mma_wait(1, deps=(acc,))  # O += P1 V1[:, 256:]: 1R's last read
    mbarrier.arrive(empty_bars.index(_half(1, RIGHT)))
    acc = warpgroup_mma_wait(0, deps=(acc,))  # O += P0 V0[:, 256:]: 0R's (and P0's) last read
    mbarrier.arrive(empty_bars.index(_half(0, RIGHT)))
    _stamp(stamps, 1, pair, 4, TRACE)
    _stamp(stamps, 1, pair, 5, TRACE)
    bits = _load_bits(union_bits, 2 * pair + 3, length, G, BLOCK_N, S_LAYOUT)
    return acc, row_sum, new_max, bits


@gluon.jit
def _release_piece(full_bars, empty_bars, index: gl.constexpr, phase):
    """DIAG_GATHER_ONLY: wait until a piece has landed (this pair's phase) and release it at once."""
    mbarrier.wait(full_bars.index(index), phase)
    mbarrier.arrive(empty_bars.index(index))


@gluon.jit
def _even_consumer(q_main, q_tail, bits_ptr, len_ptr, out_ptr, stride_bg, stride_ot, stride_oh, stride_od,
                   qk_scale_log2, main_bufs, tail_bufs, odd_p, full_bars, empty_bars, pub_bars, max_bars, max_bufs,
                   sum_bufs, sum_bars, num_heads, H: gl.constexpr, G: gl.constexpr, BLOCK_N: gl.constexpr,
                   LONGEST_FIRST: gl.constexpr, HEAD_SLICES: gl.constexpr, PARTIAL_HEADS: gl.constexpr, stamps,
                   trace_ptr, TRACE: gl.constexpr, DIAG: gl.constexpr):
    """Worker partition (one warpgroup): blocks 0, 2, 4, ... and output columns [0, D_V / 2)
    (DIAG_GATHER_ONLY: only releases 0L and 1L as they land). q_main, q_tail: [1, ...] views."""
    group, head0 = _tile_index(LONGEST_FIRST, HEAD_SLICES)
    length, union_bits, run_max, row_sum, acc, bits = _consumer_start(bits_ptr, len_ptr, stride_bg, group, 0, G,
                                                                      BLOCK_N)
    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_LAYOUT)
    if DIAG == DIAG_GATHER_ONLY:
        for pair in range(gl.cdiv(length, 2 * BLOCK_N)):
            _release_piece(full_bars, empty_bars, _half(0, LEFT), pair & 1)
            _release_piece(full_bars, empty_bars, _half(1, LEFT), pair & 1)
    else:
        acc, row_sum, run_max = _even_pairs(q_main, q_tail, main_bufs, tail_bufs, odd_p, full_bars, empty_bars,
                                            pub_bars, max_bars, max_bufs, zero_s, acc, row_sum, run_max, bits,
                                            union_bits, length, qk_scale_log2, stamps, H, G, BLOCK_N, TRACE)
    _write_out(acc, row_sum, sum_bufs.index(0), sum_bufs.index(1), sum_bars.index(0), sum_bars.index(1), 0,
               out_ptr, group, head0, num_heads, 0, stride_ot, stride_oh, stride_od, H, G, PARTIAL_HEADS, O_LAYOUT,
               ROW_LAYOUT)
    _flush_stamps(stamps, trace_ptr, group, 0, gl.cdiv(length, 2 * BLOCK_N), TRACE)
    _stamp_program(trace_ptr, group, 0, 2, 0, TRACE)
    _stamp_program(trace_ptr, group, 0, 3, 1, TRACE)


@gluon.jit
def _odd_consumer(q_main, q_tail, bits_ptr, len_ptr, out_ptr, stride_bg, stride_ot, stride_oh, stride_od,
                  qk_scale_log2, main_bufs, tail_bufs, odd_p, full_bars, empty_bars, pub_bars, max_bars, max_bufs,
                  sum_bufs, sum_bars, num_heads, H: gl.constexpr, G: gl.constexpr, BLOCK_N: gl.constexpr,
                  LONGEST_FIRST: gl.constexpr, HEAD_SLICES: gl.constexpr, PARTIAL_HEADS: gl.constexpr, stamps,
                  trace_ptr, TRACE: gl.constexpr, DIAG: gl.constexpr):
    """Worker partition (one warpgroup): blocks 1, 3, 5, ... and output columns [D_V / 2, D_V)
    (DIAG_GATHER_ONLY: only releases 0R, 1T and 1R as they land). q_main, q_tail: [1, ...] views
    (`_first_stage` indexes them)."""
    group, head0 = _tile_index(LONGEST_FIRST, HEAD_SLICES)
    length, union_bits, run_max, row_sum, acc, bits = _consumer_start(bits_ptr, len_ptr, stride_bg, group, 1, G,
                                                                      BLOCK_N)
    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_LAYOUT)
    for pair in range(gl.cdiv(length, 2 * BLOCK_N)):
        phase = pair & 1
        if DIAG == DIAG_GATHER_ONLY:
            _release_piece(full_bars, empty_bars, _half(0, RIGHT), phase)
            _release_piece(full_bars, empty_bars, ODD_TAIL, phase)
            _release_piece(full_bars, empty_bars, _half(1, RIGHT), phase)
        else:
            stage0 = _first_stage(length, pair)
            scores = _odd_scores(q_main.index(stage0), q_tail.index(stage0), main_bufs, tail_bufs, full_bars,
                                 empty_bars, zero_s, phase, stage0, stamps, pair, TRACE)
            acc, row_sum, run_max, bits = _odd_blocks(scores, bits, acc, row_sum, run_max, main_bufs, tail_bufs, odd_p,
                                                      empty_bars, pub_bars, max_bars, max_bufs, qk_scale_log2,
                                                      union_bits, length, phase, stage0, stamps, pair, H, G, BLOCK_N,
                                                      TRACE)
    _write_out(acc, row_sum, sum_bufs.index(1), sum_bufs.index(0), sum_bars.index(1), sum_bars.index(0), 0,
               out_ptr, group, head0, num_heads, D_HALF, stride_ot, stride_oh, stride_od, H, G, PARTIAL_HEADS,
               O_LAYOUT, ROW_LAYOUT)
    _flush_stamps(stamps, trace_ptr, group, 1, gl.cdiv(length, 2 * BLOCK_N), TRACE)
    _stamp_program(trace_ptr, group, 1, 2, 0, TRACE)
    _stamp_program(trace_ptr, group, 1, 3, 1, TRACE)


@gluon.jit
def _scaled_rows(rows, stride_kvs, KV_INT64: gl.constexpr):
    """Element offsets of KV rows `rows` (int32 row numbers), int64 with KV_INT64. One return
    after the branch: Gluon's code generator rejects branches that return different types."""
    if KV_INT64:
        offsets = rows.to(gl.int64) * stride_kvs
    else:
        offsets = rows * stride_kvs
    return offsets


@gluon.jit
def _block_rows(block, BLOCK_N: gl.constexpr):
    """Positions of block's rows in its union group, [BLOCK_N] in MAIN_GATHER's row slice."""
    return block * BLOCK_N + gl.arange(0, BLOCK_N, gl.SliceLayout(1, MAIN_GATHER))


@gluon.jit
def _live(block, length, BLOCK_N: gl.constexpr):
    """[BLOCK_N] live mask of block's rows in MAIN_GATHER's row slice."""
    return _block_rows(block, BLOCK_N) < length


@gluon.jit
def _row_offsets(rows_ptr, block, length, stride_kvs, BLOCK_N: gl.constexpr, KV_INT64: gl.constexpr):
    """(element offsets of block's KV rows, live mask), both [BLOCK_N] in MAIN_GATHER's row slice."""
    live = _live(block, length, BLOCK_N)
    rows = gl.load(rows_ptr + _block_rows(block, BLOCK_N), mask=live, other=0)
    return _scaled_rows(rows, stride_kvs, KV_INT64), live


@gluon.jit
def _early_rows(rows_ptr, block, row_width, BLOCK_N: gl.constexpr):
    """Block's row numbers loaded before the group's length is known (int32 [BLOCK_N],
    0 past the row width `row_width`; entries past the length are unspecified and masked later)."""
    offs_n = _block_rows(block, BLOCK_N)
    return gl.load(rows_ptr + offs_n, mask=offs_n < row_width, other=0)


@gluon.jit
def _gather_tail(kv_ptr, row_off, live, tail_buf, D_TAIL: gl.constexpr):
    """cp.async a block's rope tail (columns [512, 512 + D_TAIL); zeros for rows that are not live),
    in MAIN_GATHER like the main columns, so the row offsets need no layout conversion."""
    offs_r = 2 * D_HALF + gl.arange(0, D_TAIL, gl.SliceLayout(0, MAIN_GATHER))
    async_copy.async_copy_global_to_shared(tail_buf, kv_ptr + row_off[:, None] + offs_r[None, :],
                                           mask=live[:, None])


@gluon.jit
def _gather_half(kv_ptr, row_off, live, main_buf, tail_buf, half: gl.constexpr, D_TAIL: gl.constexpr,
                 WITH_TAIL: gl.constexpr):
    """cp.async one half of a block into its stage: L = main columns [0, 256), R = [256, 512) and,
    WITH_TAIL, the rope tail (zeros for rows that are not live)."""
    offs_d = half * D_HALF + gl.arange(0, D_HALF, gl.SliceLayout(0, MAIN_GATHER))
    async_copy.async_copy_global_to_shared(main_buf.slice(half * D_HALF, D_HALF, dim=1),
                                           kv_ptr + row_off[:, None] + offs_d[None, :], mask=live[:, None])
    if half == RIGHT and WITH_TAIL:
        _gather_tail(kv_ptr, row_off, live, tail_buf, D_TAIL)


@gluon.jit
def _fill_half(kv_ptr, row_off, live, main_bufs, tail_bufs, full_bars, empty_bars, stage: gl.constexpr,
               half: gl.constexpr, pair, phase, D_TAIL: gl.constexpr, WITH_TAIL: gl.constexpr,
               DIAG: gl.constexpr):
    """Wait until a stage half is free (a fresh barrier counts as free), gather into it, and have
    each thread's copies arrive on its full barrier when they land (DIAG_COMPUTE_ONLY: gathers
    the first pair only)."""
    mbarrier.wait(empty_bars.index(_half(stage, half)), phase ^ 1)
    if DIAG == DIAG_COMPUTE_ONLY:
        if pair == 0:
            _gather_half(kv_ptr, row_off, live, main_bufs.index(stage), tail_bufs.index(stage), half, D_TAIL,
                         WITH_TAIL)
    else:
        _gather_half(kv_ptr, row_off, live, main_bufs.index(stage), tail_bufs.index(stage), half, D_TAIL, WITH_TAIL)
    async_copy.mbarrier_arrive(full_bars.index(_half(stage, half)), increment_count=False)


@gluon.jit
def _fill_odd_tail(kv_ptr, row_off, live, tail_bufs, full_bars, empty_bars, pair, phase, D_TAIL: gl.constexpr,
                   DIAG: gl.constexpr):
    """As _fill_half, for stage 1's rope tail, a piece of its own."""
    mbarrier.wait(empty_bars.index(ODD_TAIL), phase ^ 1)
    if DIAG == DIAG_COMPUTE_ONLY:
        if pair == 0:
            _gather_tail(kv_ptr, row_off, live, tail_bufs.index(1), D_TAIL)
    else:
        _gather_tail(kv_ptr, row_off, live, tail_bufs.index(1), D_TAIL)
    async_copy.mbarrier_arrive(full_bars.index(ODD_TAIL), increment_count=False)


@gluon.jit
def _copy_q(q_ptr, group, head0, num_heads, stride_qt, stride_qh, stride_qd, q_main, q_tail, H: gl.constexpr,
            G: gl.constexpr, D_V: gl.constexpr, D_TAIL: gl.constexpr, PARTIAL_HEADS: gl.constexpr):
    """cp.async a group's Q tile [64, D_V + D_TAIL] (token-major rows, heads from head0) into shared
    memory, as one committed copy group. PARTIAL_HEADS: rows of heads at or past num_heads are
    padding, filled with zeros (their scores are 0, finite; `_store_half` drops their output)."""
    offs_m = gl.arange(0, BLOCK_M, gl.SliceLayout(1, MAIN_GATHER))
    head = head0 + offs_m % H
    q_row = q_ptr + (group * G + offs_m // H)[:, None] * stride_qt + head[:, None] * stride_qh
    offs_d = gl.arange(0, D_V, gl.SliceLayout(0, MAIN_GATHER))
    offs_r = gl.arange(0, D_TAIL, gl.SliceLayout(0, MAIN_GATHER))
    if PARTIAL_HEADS:
        real = (head < num_heads)[:, None]
        async_copy.async_copy_global_to_shared(q_main, q_row + offs_d[None, :] * stride_qd, mask=real)
        async_copy.async_copy_global_to_shared(q_tail, q_row + (D_V + offs_r)[None, :] * stride_qd, mask=real)
    else:
        async_copy.async_copy_global_to_shared(q_main, q_row + offs_d[None, :] * stride_qd)
        async_copy.async_copy_global_to_shared(q_tail, q_row + (D_V + offs_r)[None, :] * stride_qd)
    async_copy.commit_group()


@gluon.jit
def _fill_pair(kv_ptr, union_rows, length, stride_kvs, main_bufs, tail_bufs, full_bars, empty_bars, pair, phase,
               D_TAIL: gl.constexpr, BLOCK_N: gl.constexpr, KV_INT64: gl.constexpr,
               DIAG: gl.constexpr):
    """Gather blocks 2 pair and 2 pair + 1 of a union group (`_fill_pair_at`)."""
    even_off, even_live = _row_offsets(union_rows, 2 * pair, length, stride_kvs, BLOCK_N, KV_INT64)
    odd_off, odd_live = _row_offsets(union_rows, 2 * pair + 1, length, stride_kvs, BLOCK_N, KV_INT64)
    _fill_pair_at(kv_ptr, even_off, even_live, odd_off, odd_live, main_bufs, tail_bufs, full_bars, empty_bars, pair,
                  phase, D_TAIL, DIAG)


@gluon.jit
def _fill_pair_at(kv_ptr, even_off, even_live, odd_off, odd_live, main_bufs, tail_bufs, full_bars, empty_bars, pair,
                  phase, D_TAIL: gl.constexpr, DIAG: gl.constexpr):
    """Gather a pair's two blocks from their row offsets and live masks, in the order the pieces
    are freed: 0L, 1T, 1R (without the tail), 0R (with stage 0's tail), 1L. The even block's
    offsets are held across the odd block's fills: 4 rows a thread (MAIN_GATHER) fit the
    producer's 56 registers (with 8, ptxas spilled 21-24 loads a pair; run 18, note 66)."""
    _fill_half(kv_ptr, even_off, even_live, main_bufs, tail_bufs, full_bars, empty_bars, 0, LEFT, pair, phase,
               D_TAIL, True, DIAG)
    _fill_odd_tail(kv_ptr, odd_off, odd_live, tail_bufs, full_bars, empty_bars, pair, phase, D_TAIL, DIAG)
    _fill_half(kv_ptr, odd_off, odd_live, main_bufs, tail_bufs, full_bars, empty_bars, 1, RIGHT, pair, phase,
               D_TAIL, False, DIAG)
    _fill_half(kv_ptr, even_off, even_live, main_bufs, tail_bufs, full_bars, empty_bars, 0, RIGHT, pair, phase, D_TAIL,
               True, DIAG)
    _fill_half(kv_ptr, odd_off, odd_live, main_bufs, tail_bufs, full_bars, empty_bars, 1, LEFT, pair, phase,
               D_TAIL, True, DIAG)


@gluon.jit
def _pair_producer(kv_ptr, rows_ptr, len_ptr, stride_kvs, stride_rg, main_bufs, tail_bufs, full_bars, empty_bars,
                   D_TAIL: gl.constexpr, BLOCK_N: gl.constexpr, KV_INT64: gl.constexpr,
                   LONGEST_FIRST: gl.constexpr, HEAD_SLICES: gl.constexpr, DIAG: gl.constexpr):
    """Default partition: every pair of the program's union group (`_fill_pair`). The first pair's
    row numbers are loaded alongside the group's length, not after it (rows are contiguous, so
    stride_rg is their width): one dependent global round trip less before the first gather, of
    the three (length, rows, gather) that note 49 found at a program's start. GPU run 17: 1.02x at
    H = 64, 1 x 8192, 1.03-1.04x at 1 x 2048, 1.00x at union 8, 1 x 8192 (note 62)."""
    group, _ = _tile_index(LONGEST_FIRST, HEAD_SLICES)
    union_rows = rows_ptr + group * stride_rg
    even_rows = _early_rows(union_rows, 0, stride_rg, BLOCK_N)
    odd_rows = _early_rows(union_rows, 1, stride_rg, BLOCK_N)
    length = gl.load(len_ptr + group)
    if length > 0:
        _fill_pair_at(kv_ptr, _scaled_rows(even_rows, stride_kvs, KV_INT64), _live(0, length, BLOCK_N),
                      _scaled_rows(odd_rows, stride_kvs, KV_INT64), _live(1, length, BLOCK_N), main_bufs, tail_bufs,
                      full_bars, empty_bars, 0, 0, D_TAIL, DIAG)
    for pair in range(1, gl.cdiv(length, 2 * BLOCK_N)):
        _fill_pair(kv_ptr, union_rows, length, stride_kvs, main_bufs, tail_bufs, full_bars, empty_bars, pair,
                   pair & 1, D_TAIL, BLOCK_N, KV_INT64, DIAG)
    async_copy.wait_group(0)  # Q's copies (committed as a group) have landed before the program can end


@gluon.jit
def _assert_tile_shape(H: gl.constexpr, G: gl.constexpr, D_V: gl.constexpr, D_TAIL: gl.constexpr,
                       BLOCK_N: gl.constexpr, HEAD_SLICES: gl.constexpr, PARTIAL_HEADS: gl.constexpr):
    """The only shape the tile takes (its layouts and buffers assume it)."""
    gl.static_assert(G * H == BLOCK_M, "the ping-pong tile holds exactly 64 query rows")
    gl.static_assert(G == 1 or (HEAD_SLICES == 1 and not PARTIAL_HEADS),
                     "head slices and padded heads are for one-token groups (G = 1) only")
    gl.static_assert(BLOCK_N == D_TAIL, "P [64, BLOCK_N] lives in a block's rope-tail buffer [BLOCK_N, D_TAIL]")
    gl.static_assert(BLOCK_N == BLOCK_M, "P's buffer has the tail's shape only when BLOCK_N == 64")
    gl.static_assert(D_V == 2 * D_HALF, "the consumer layouts are for d_v = 512")


@gluon.jit
def _allocate_q(D_V: gl.constexpr, D_TAIL: gl.constexpr):
    """Shared memory for the Q tile: (main columns [1, 64, D_V], rope tail [1, 64, D_TAIL]), bf16; the
    leading dimension of one lets the odd warpgroup index Q like the stages (`_first_stage`)."""
    dtype: gl.constexpr = gl.bfloat16
    q_main = gl.allocate_shared_memory(dtype, [1, BLOCK_M, D_V],
                                       gl.NVMMASharedLayout.get_default_for([BLOCK_M, D_V], dtype))
    q_tail = gl.allocate_shared_memory(dtype, [1, BLOCK_M, D_TAIL],
                                       gl.NVMMASharedLayout.get_default_for([BLOCK_M, D_TAIL], dtype))
    return q_main, q_tail


@gluon.jit
def _allocate_stages(D_V: gl.constexpr, D_TAIL: gl.constexpr, BLOCK_N: gl.constexpr):
    """Shared memory for the two KV stages (main columns, rope tails), the odd warpgroup's P, and
    the running maxima and row sums the warpgroups exchange."""
    dtype: gl.constexpr = gl.bfloat16
    kv_tail_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_TAIL], dtype)
    row_smem_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    main_bufs = gl.allocate_shared_memory(dtype, [2, BLOCK_N, D_V],
                                          gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], dtype))
    tail_bufs = gl.allocate_shared_memory(dtype, [2, BLOCK_N, D_TAIL], kv_tail_layout)
    odd_p = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], kv_tail_layout)  # the odd warpgroup's P
    max_bufs = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M], row_smem_layout)
    sum_bufs = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M], row_smem_layout)
    return main_bufs, tail_bufs, odd_p, max_bufs, sum_bufs


@gluon.jit
def _init_barriers():
    """(full, empty: one per stage piece; pub (P), sum: one per warpgroup) mbarriers, initialised."""
    full_bars = gl.allocate_shared_memory(gl.int64, [NUM_PIECES, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [NUM_PIECES, 1], mbarrier.MBarrierLayout())
    pub_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    sum_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_PIECES):
        mbarrier.init(full_bars.index(i), count=WARPGROUP_WARPS * 32)  # every producer thread's copies
        mbarrier.init(empty_bars.index(i), count=1)  # each piece has one last reader
    for i in gl.static_range(2):
        mbarrier.init(pub_bars.index(i), count=1)
        mbarrier.init(sum_bars.index(i), count=1)
    return full_bars, empty_bars, pub_bars, sum_bars


@gluon.jit
def _init_max_barriers():
    """The two max handoffs' mbarriers (one per warpgroup), initialised. Allocated after the trace
    stamps: allocated with the other barriers, the shifted shared-memory offsets cost the
    producer's pair loop 9 spill loads (ptxas, H = 64)."""
    max_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(max_bars.index(i), count=1)
    return max_bars


@gluon.jit
def sparse_mla_union_pingpong_kernel(
    q_ptr, kv_ptr, rows_ptr, bits_ptr, len_ptr, out_ptr,
    stride_qt, stride_qh, stride_qd, stride_kvs,
    stride_rg, stride_bg,
    stride_ot, stride_oh, stride_od,
    qk_scale_log2, num_heads,
    H: gl.constexpr, G: gl.constexpr, D_V: gl.constexpr, D_TAIL: gl.constexpr, BLOCK_N: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, KV_INT64: gl.constexpr, LONGEST_FIRST: gl.constexpr = False,
    HEAD_SLICES: gl.constexpr = 1, PARTIAL_HEADS: gl.constexpr = False,
    trace_ptr=None, TRACE: gl.constexpr = False, DIAG: gl.constexpr = 0,
):
    """Grid (num_groups,); launch with num_warps=WARPGROUP_WARPS. kv rows contiguous (stride 1
    along D). rows/bits/len from the union build (rows in [0, S); rows contiguous, since the
    producer takes stride_rg as their width). Grid (num_groups * HEAD_SLICES,) with G = 1 and H = 64
    tile rows per token: a token's num_heads heads run as HEAD_SLICES slices of 64 (`_tile_index`),
    PARTIAL_HEADS when num_heads is not a multiple of 64 (the last slice's missing heads are
    zero-padded rows, never stored); with G > 1, num_heads = H. trace_ptr (diagnostic, TRACE):
    int64 [num_groups, 2, TRACE_SLOTS, TRACE_EVENTS]: per pair (the first TRACE_PAIRS), then the
    program's entry and exit (ENTRY_CLOCK ... SM_ID). DIAG (diagnostic, not a kernel path):
    DIAG_NONE ... DIAG_COMPUTE_ONLY."""
    _assert_tile_shape(H, G, D_V, D_TAIL, BLOCK_N, HEAD_SLICES, PARTIAL_HEADS)
    # Q tile [64, D_V + D_TAIL] into shared memory (token-major rows) by cp.async: 144 registers
    # per thread if staged through registers, which spilled. Nothing waits for it here: the default
    # warps issue it and then run the producer, whose first barrier arrive per piece covers every
    # earlier copy of the thread, Q's included, so each consumer's first S waits for Q too, while
    # the first gathers already run under Q's latency.
    group, head0 = _tile_index(LONGEST_FIRST, HEAD_SLICES)
    q_main, q_tail = _allocate_q(D_V, D_TAIL)
    _copy_q(q_ptr, group, head0, num_heads, stride_qt, stride_qh, stride_qd, q_main.index(0), q_tail.index(0), H, G,
            D_V, D_TAIL, PARTIAL_HEADS)
    main_bufs, tail_bufs, odd_p, max_bufs, sum_bufs = _allocate_stages(D_V, D_TAIL, BLOCK_N)
    full_bars, empty_bars, pub_bars, sum_bars = _init_barriers()
    stamps = _allocate_stamps(TRACE)
    max_bars = _init_max_barriers()
    gl.thread_barrier()  # the barriers are initialised before any partition uses them
    fence_async_shared()  # the barriers, for the async proxy (cp.async arrivals)
    # Entry stamps after that fence (a MEMBAR.ALL.CTA, which would wait for their global stores).
    _stamp_program(trace_ptr, group, 0, 0, 0, TRACE)
    _stamp_program(trace_ptr, group, 0, 1, 1, TRACE)
    _stamp_program(trace_ptr, group, 0, 4, 2, TRACE)

    # The producer is the default partition (the launch's warps); the two consumer warpgroups are
    # workers with CONSUMER_REGS registers each.
    gl.warp_specialize([
        (_pair_producer, (kv_ptr, rows_ptr, len_ptr, stride_kvs, stride_rg, main_bufs, tail_bufs, full_bars,
                          empty_bars, D_TAIL, BLOCK_N, KV_INT64, LONGEST_FIRST, HEAD_SLICES, DIAG)),
        (_even_consumer, (q_main, q_tail, bits_ptr, len_ptr, out_ptr, stride_bg, stride_ot, stride_oh, stride_od,
                          qk_scale_log2, main_bufs, tail_bufs, odd_p, full_bars, empty_bars, pub_bars, max_bars,
                          max_bufs, sum_bufs, sum_bars, num_heads, H, G, BLOCK_N, LONGEST_FIRST, HEAD_SLICES,
                          PARTIAL_HEADS, stamps, trace_ptr, TRACE, DIAG)),
        (_odd_consumer, (q_main, q_tail, bits_ptr, len_ptr, out_ptr, stride_bg, stride_ot, stride_oh, stride_od,
                         qk_scale_log2, main_bufs, tail_bufs, odd_p, full_bars, empty_bars, pub_bars, max_bars,
                         max_bufs, sum_bufs, sum_bars, num_heads, H, G, BLOCK_N, LONGEST_FIRST, HEAD_SLICES,
                         PARTIAL_HEADS, stamps, trace_ptr, TRACE, DIAG)),
    ], [WARPGROUP_WARPS, WARPGROUP_WARPS], [CONSUMER_REGS, CONSUMER_REGS])
