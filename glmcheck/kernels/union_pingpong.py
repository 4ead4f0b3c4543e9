"""Gluon kernel (Hopper only): the 64-row union tile with two ping-pong consumer warpgroups.

Same contract and result as `union_ws.sparse_mla_union_ws_kernel` (one group of G adjacent tokens
per program, G*H = 64 token-major query rows, ownership bits mask foreign rows), but the two
consumer warpgroups split the work by KV block instead of by column (docs/performance.md, note 41):
  * the even warpgroup takes union blocks 0, 2, 4, ..., the odd one blocks 1, 3, 5, ...; each
    computes its own block's full S = Q K^T ([64, 64]: one 64-wide warpgroup MMA instead of two
    32-wide halves, which read Q from shared memory twice per column) and its softmax;
  * both own half of the output columns (fp32 accumulator [64, 256] each), so each block's P
    goes to both: its owner keeps P in registers, and stores it (bf16) in the block's rope-tail
    buffer, which nothing reads once S is done, for the other warpgroup's MMA;
  * one running row max M: block b's max is max(M after block b-1, rowmax S_b), so the
    warpgroups pass M through shared memory, one after the other. While one runs its softmax,
    the other's MMAs keep the tensor cores busy (ping-pong);
  * the producer partition is `union_ws`'s: cp.async gathers of block b into stage b % 2, so
    each warpgroup's blocks always land in the same stage. A block count that is odd gets one
    more block that is all masked (no copies land; P = 0).
Per block pair, with phase = pair % 2 on every barrier:
  even: wait full[0]; S0; softmax with M_prev; publish M0, P0 (pub[0]); O *= alpha; O += P0 V0[:, :256];
        wait pub[1]; O *= alpha; O += P1 V1[:, :256]; release stages 0 and 1 (empty, one arrive each)
  odd:  wait full[1]; S1; wait pub[0]; O *= alpha; O += P0 V0[:, 256:] (async, under the softmax);
        softmax with M0; publish M1, P1 (pub[1]); O *= alpha; O += P1 V1[:, 256:]; release both
Each warpgroup's row sums cover its own blocks; they are added through shared memory at the end.

Needs triton.experimental.gluon as in triton 3.6 and an sm_90 GPU; the CPU interpreter does not
run Gluon. Launcher: `glmcheck.kernels.union_ws_launch` (WsConfig.tile = "pingpong").
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

from glmcheck.kernels.union_ws import _gather_block, _group_index

BLOCK_M = gl.constexpr(64)  # query rows per program: one warpgroup MMA tile (G * H)
WARPGROUP_WARPS = gl.constexpr(4)  # each consumer partition is one warpgroup (the launch's num_warps)


# One consumer warpgroup's register layouts, for the only shape this tile takes (the kernel asserts
# BLOCK_N = 64 and D_V = 512): S [64, 64], O [64, 256] (its half of the columns), P as the A operand
# of O += P V, and one value per query row.
D_HALF = gl.constexpr(256)
S_LAYOUT = gl.constexpr(gl.NVMMADistributedLayout([3, 0], [4, 1], [16, 64, 16]))
O_LAYOUT = gl.constexpr(gl.NVMMADistributedLayout([3, 0], [4, 1], [16, 256, 16]))
P_LAYOUT = gl.constexpr(gl.DotOperandLayout(0, O_LAYOUT, 2))
ROW_LAYOUT = gl.constexpr(gl.SliceLayout(1, S_LAYOUT))


@gluon.jit
def _issue_scores(q_main, q_tail, main_buf, tail_buf, s_layout: gl.constexpr, BLOCK_N: gl.constexpr,
                  KNOCKOUT: gl.constexpr):
    """Start S = Q K^T for the block in one stage (async; wait with warpgroup_mma_wait).
    KNOCKOUT 4 (diagnostic): the rope-tail product only."""
    zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    if KNOCKOUT == 4:
        return warpgroup_mma(q_tail, tail_buf.permute((1, 0)), zero, use_acc=False, is_async=True)
    scores = warpgroup_mma(q_main, main_buf.permute((1, 0)), zero, use_acc=False, is_async=True)
    return warpgroup_mma(q_tail, tail_buf.permute((1, 0)), scores, is_async=True)


@gluon.jit
def _load_bits(union_bits, block, length, BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
    """Ownership bits of one block's union rows (uint8 [BLOCK_N], 0 past `length`). Loaded a pair
    ahead: a load used at once stalled the warpgroup for ~1700 cycles before its barrier wait."""
    offs_n = block * BLOCK_N + gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
    return gl.load(union_bits + offs_n, mask=offs_n < length, other=0)


@gluon.jit
def _owned(bits, H: gl.constexpr, s_layout: gl.constexpr):
    """[64, BLOCK_N] mask: the query row's token owns the union row. Every live union row has an
    owner, and rows past the length have no bits, so this is also the live mask."""
    member = gl.arange(0, BLOCK_M, gl.SliceLayout(1, s_layout)) // H
    return ((bits.to(gl.int32)[None, :] >> member[:, None]) & 1) != 0


TRACE_PAIRS = gl.constexpr(16)  # diagnostic trace: the first pairs of each program
TRACE_EVENTS = gl.constexpr(6)  # full, scores, published, peer seen, first PV done, pair done


@gluon.jit
def _stamp(trace_ptr, warpgroup: gl.constexpr, pair, event: gl.constexpr, TRACE: gl.constexpr):
    """Diagnostic: %clock64 into trace[program, warpgroup, pair, event] (int64) for the first
    TRACE_PAIRS pairs; nothing without TRACE."""
    if TRACE:
        layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        offs = gl.arange(0, 1, layout)
        trace_ptr += (gl.program_id(0).to(gl.int64) * 2 + warpgroup) * TRACE_PAIRS * TRACE_EVENTS
        now = gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [offs], dtype=gl.int64, is_pure=False,
                                        pack=1)
        gl.store(trace_ptr + pair * TRACE_EVENTS + event + offs, now, mask=(offs + pair) < TRACE_PAIRS)


@gluon.jit
def _loop_zero(pair):
    """0, computed from the loop counter: shared-memory addresses built from it stay inside the
    loop. With constant stage indices the compiler hoisted every wgmma descriptor of S = Q K^T out
    of the loop, which spilled (ws_compile.py: 584 bytes of stack, against none with this)."""
    return gl.minimum(pair, 0)


@gluon.jit
def _shift(row_max):
    """The row max a block's P is taken against: 0 where nothing is live yet (-inf)."""
    return gl.where(row_max == float("-inf"), 0.0, row_max)


@gluon.jit
def _rescale(acc, row_sum, max_from, max_to, o_layout: gl.constexpr):
    """Move O and the row sums from the max `max_from` to the (larger) max `max_to`."""
    alpha = gl.exp2(max_from - _shift(max_to))
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    return acc, row_sum * alpha


@gluon.jit
def _publish(row_max, p, max_buf, p_buf, bar):
    """Hand this block's running max and P (bf16, for the peer's MMA) to the other warpgroup."""
    max_buf.store(row_max)
    p_buf.store(p.to(gl.bfloat16))
    fence_async_shared()  # P is read by the peer's wgmma (async proxy)
    gl.thread_barrier()  # every thread's stores are done before the single arrive
    mbarrier.arrive(bar)


@gluon.jit
def _write_out(acc, row_sum, sum_mine, sum_peer, bar_mine, bar_peer, out_ptr, group, col0,
               stride_ot, stride_oh, stride_od, H: gl.constexpr, G: gl.constexpr, D_HALF: gl.constexpr,
               o_layout: gl.constexpr, row_layout: gl.constexpr):
    """Add the peer's row sums to this warpgroup's, normalise its half of O and store it."""
    sum_mine.store(row_sum)
    gl.thread_barrier()
    mbarrier.arrive(bar_mine)
    mbarrier.wait(bar_peer, 0)
    total = row_sum + sum_peer.load(row_layout)
    denom = gl.convert_layout(gl.where(total > 0.0, total, 1.0), gl.SliceLayout(1, o_layout))
    out = (acc / denom[:, None]).to(gl.bfloat16)
    offs_m = gl.arange(0, BLOCK_M, gl.SliceLayout(1, o_layout))
    token = group * G + offs_m // H
    head = offs_m % H
    offs_d = col0 + gl.arange(0, D_HALF, gl.SliceLayout(0, o_layout))
    gl.store(out_ptr + token[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :] * stride_od, out)


@gluon.jit
def _even_consumer(q_main, q_tail, bits_ptr, len_ptr, out_ptr, stride_bg, stride_ot, stride_oh, stride_od,
                   qk_scale_log2, main_bufs, tail_bufs, full_bars, empty_bars, pub_bars, max_bufs, sum_bufs,
                   sum_bars, H: gl.constexpr, G: gl.constexpr, D_V: gl.constexpr, BLOCK_N: gl.constexpr,
                   LONGEST_FIRST: gl.constexpr, ODD_OVERLAP: gl.constexpr,
                   KNOCKOUT: gl.constexpr, trace_ptr, TRACE: gl.constexpr):
    """Default partition (one warpgroup): blocks 0, 2, 4, ... and output columns [0, D_V / 2)."""
    s_layout: gl.constexpr = S_LAYOUT
    o_layout: gl.constexpr = O_LAYOUT
    p_layout: gl.constexpr = P_LAYOUT
    row_layout: gl.constexpr = ROW_LAYOUT
    group = _group_index(LONGEST_FIRST)
    length = gl.load(len_ptr + group)
    union_bits = bits_ptr + group * stride_bg
    run_max = gl.full([BLOCK_M], float("-inf"), gl.float32, row_layout)
    row_sum = gl.zeros([BLOCK_M], gl.float32, row_layout)
    acc = gl.zeros([BLOCK_M, D_HALF], gl.float32, o_layout)
    bits = _load_bits(union_bits, 0, length, BLOCK_N, s_layout)
    for pair in range(gl.cdiv(length, 2 * BLOCK_N)):
        phase = pair & 1
        own_stage = _loop_zero(pair)
        peer_stage = own_stage + 1
        own_main = main_bufs.index(own_stage)
        own_tail = tail_bufs.index(own_stage)
        mbarrier.wait(full_bars.index(0), phase)
        _stamp(trace_ptr, 0, pair, 0, TRACE)
        fence_async_shared()  # cp.async wrote through the generic proxy; wgmma reads through the async one
        scores = _issue_scores(q_main.index(_loop_zero(pair)), q_tail.index(_loop_zero(pair)), own_main, own_tail,
                               s_layout, BLOCK_N, KNOCKOUT)
        scores = warpgroup_mma_wait(0, deps=(scores,))
        _stamp(trace_ptr, 0, pair, 1, TRACE)
        logits = gl.where(_owned(bits, H, s_layout), scores * qk_scale_log2, float("-inf"))
        new_max = gl.maximum(run_max, gl.max(logits, 1))
        p = gl.exp2(logits - _shift(new_max)[:, None])
        if KNOCKOUT == 2:  # diagnostic: no softmax (P = S)
            new_max = run_max
            p = scores
        _publish(new_max, p, max_bufs.index(0), own_tail, pub_bars.index(0))
        _stamp(trace_ptr, 0, pair, 2, TRACE)
        acc, row_sum = _rescale(acc, row_sum, run_max, new_max, o_layout)
        row_sum += gl.sum(p, 1)
        run_max = new_max
        if KNOCKOUT != 3:  # diagnostic: no O += P V
            acc = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), p_layout), own_main.slice(0, D_HALF, dim=1),
                                acc, is_async=True)
        mbarrier.wait(pub_bars.index(1), phase)
        peer_max = max_bufs.index(1).load(row_layout)
        _stamp(trace_ptr, 0, pair, 3, TRACE)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty_bars.index(0))
        _stamp(trace_ptr, 0, pair, 4, TRACE)
        acc, row_sum = _rescale(acc, row_sum, run_max, peer_max, o_layout)
        run_max = peer_max
        if KNOCKOUT != 3:  # diagnostic: no O += P V
            acc = warpgroup_mma(tail_bufs.index(peer_stage), main_bufs.index(peer_stage).slice(0, D_HALF, dim=1), acc,
                                is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty_bars.index(1))
        _stamp(trace_ptr, 0, pair, 5, TRACE)
        bits = _load_bits(union_bits, 2 * pair + 2, length, BLOCK_N, s_layout)
    _write_out(acc, row_sum, sum_bufs.index(0), sum_bufs.index(1), sum_bars.index(0), sum_bars.index(1),
               out_ptr, group, 0, stride_ot, stride_oh, stride_od, H, G, D_HALF, o_layout, row_layout)


@gluon.jit
def _odd_consumer(q_main, q_tail, bits_ptr, len_ptr, out_ptr, stride_bg, stride_ot, stride_oh, stride_od,
                  qk_scale_log2, main_bufs, tail_bufs, full_bars, empty_bars, pub_bars, max_bufs, sum_bufs,
                  sum_bars, H: gl.constexpr, G: gl.constexpr, D_V: gl.constexpr, BLOCK_N: gl.constexpr,
                  LONGEST_FIRST: gl.constexpr, ODD_OVERLAP: gl.constexpr,
                   KNOCKOUT: gl.constexpr, trace_ptr, TRACE: gl.constexpr):
    """Worker partition (one warpgroup): blocks 1, 3, 5, ... and output columns [D_V / 2, D_V)."""
    s_layout: gl.constexpr = S_LAYOUT
    o_layout: gl.constexpr = O_LAYOUT
    p_layout: gl.constexpr = P_LAYOUT
    row_layout: gl.constexpr = ROW_LAYOUT
    group = _group_index(LONGEST_FIRST)
    length = gl.load(len_ptr + group)
    union_bits = bits_ptr + group * stride_bg
    run_max = gl.full([BLOCK_M], float("-inf"), gl.float32, row_layout)
    row_sum = gl.zeros([BLOCK_M], gl.float32, row_layout)
    acc = gl.zeros([BLOCK_M, D_HALF], gl.float32, o_layout)
    bits = _load_bits(union_bits, 1, length, BLOCK_N, s_layout)
    for pair in range(gl.cdiv(length, 2 * BLOCK_N)):
        phase = pair & 1
        peer_stage = _loop_zero(pair)
        own_stage = peer_stage + 1
        own_main = main_bufs.index(own_stage)
        own_tail = tail_bufs.index(own_stage)
        mbarrier.wait(full_bars.index(1), phase)
        _stamp(trace_ptr, 1, pair, 0, TRACE)
        fence_async_shared()
        scores = _issue_scores(q_main.index(_loop_zero(pair)), q_tail.index(_loop_zero(pair)), own_main, own_tail,
                               s_layout, BLOCK_N, KNOCKOUT)
        mbarrier.wait(pub_bars.index(0), phase)
        peer_max = max_bufs.index(0).load(row_layout)
        _stamp(trace_ptr, 1, pair, 3, TRACE)
        acc, row_sum = _rescale(acc, row_sum, run_max, peer_max, o_layout)
        if ODD_OVERLAP:
            # The peer's block first (its P is taken against peer_max); it runs under this softmax.
            if KNOCKOUT != 3:  # diagnostic: no O += P V
                acc = warpgroup_mma(tail_bufs.index(peer_stage), main_bufs.index(peer_stage).slice(D_HALF, D_HALF, dim=1),
                                    acc,
                                    is_async=True)
            scores = warpgroup_mma_wait(1, deps=(scores,))
        else:
            scores = warpgroup_mma_wait(0, deps=(scores,))
        _stamp(trace_ptr, 1, pair, 1, TRACE)
        logits = gl.where(_owned(bits, H, s_layout), scores * qk_scale_log2, float("-inf"))
        new_max = gl.maximum(peer_max, gl.max(logits, 1))
        p = gl.exp2(logits - _shift(new_max)[:, None])
        if KNOCKOUT == 2:  # diagnostic: no softmax (P = S)
            new_max = peer_max
            p = scores
        _publish(new_max, p, max_bufs.index(1), own_tail, pub_bars.index(1))
        _stamp(trace_ptr, 1, pair, 2, TRACE)
        if not ODD_OVERLAP and KNOCKOUT != 3:  # (KNOCKOUT 3, diagnostic: no O += P V)
            acc = warpgroup_mma(tail_bufs.index(peer_stage), main_bufs.index(peer_stage).slice(D_HALF, D_HALF, dim=1),
                                acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty_bars.index(0))
        _stamp(trace_ptr, 1, pair, 4, TRACE)
        acc, row_sum = _rescale(acc, row_sum, peer_max, new_max, o_layout)
        row_sum += gl.sum(p, 1)
        run_max = new_max
        if KNOCKOUT != 3:  # diagnostic: no O += P V
            acc = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), p_layout), own_main.slice(D_HALF, D_HALF, dim=1),
                                acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty_bars.index(1))
        _stamp(trace_ptr, 1, pair, 5, TRACE)
        bits = _load_bits(union_bits, 2 * pair + 3, length, BLOCK_N, s_layout)
    _write_out(acc, row_sum, sum_bufs.index(1), sum_bufs.index(0), sum_bars.index(1), sum_bars.index(0),
               out_ptr, group, D_HALF, stride_ot, stride_oh, stride_od, H, G, D_HALF, o_layout, row_layout)


@gluon.jit
def _pair_producer(kv_ptr, rows_ptr, len_ptr, stride_kvs, stride_rg, main_bufs, tail_bufs, full_bars, empty_bars,
                   D_V: gl.constexpr, D_TAIL: gl.constexpr, BLOCK_N: gl.constexpr, WARPS: gl.constexpr,
                   KV_INT64: gl.constexpr, LONGEST_FIRST: gl.constexpr, KNOCKOUT: gl.constexpr):
    """Default partition: gather block b into stage b % 2, over an even number of blocks."""
    group = _group_index(LONGEST_FIRST)
    length = gl.load(len_ptr + group)
    union_rows = rows_ptr + group * stride_rg
    for block in range(2 * gl.cdiv(length, 2 * BLOCK_N)):
        stage = block % 2
        # A fresh barrier counts as having completed the phase before phase 0: the first waits pass.
        mbarrier.wait(empty_bars.index(stage), ((block // 2) & 1) ^ 1)
        if KNOCKOUT == 0:  # diagnostic: 1-4 copy nothing (outputs not attention)
            _gather_block(kv_ptr, union_rows, block * BLOCK_N, length, stride_kvs,
                          main_bufs.index(stage), tail_bufs.index(stage), D_V, D_TAIL, BLOCK_N, WARPS, KV_INT64)
        async_copy.mbarrier_arrive(full_bars.index(stage), increment_count=False)


@gluon.jit
def sparse_mla_union_pingpong_kernel(
    q_ptr, kv_ptr, rows_ptr, bits_ptr, len_ptr, out_ptr,
    stride_qt, stride_qh, stride_qd, stride_kvs,
    stride_rg, stride_bg,
    stride_ot, stride_oh, stride_od,
    qk_scale_log2,
    H: gl.constexpr, G: gl.constexpr, D_V: gl.constexpr, D_TAIL: gl.constexpr,
    BLOCK_N: gl.constexpr, PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, KV_INT64: gl.constexpr, LONGEST_FIRST: gl.constexpr = False,
    ODD_OVERLAP: gl.constexpr = True, KNOCKOUT: gl.constexpr = 0, trace_ptr=None, TRACE: gl.constexpr = False,
):
    """Grid (num_groups,); launch with num_warps=WARPGROUP_WARPS. kv rows contiguous (stride 1
    along D). rows/bits/len from the union build (rows in [0, S))."""
    gl.static_assert(G * H == BLOCK_M, "the ping-pong tile holds exactly 64 query rows")
    gl.static_assert(BLOCK_N == D_TAIL, "P [64, BLOCK_N] lives in a block's rope-tail buffer [BLOCK_N, D_TAIL]")
    gl.static_assert(BLOCK_N == BLOCK_M, "P's buffer has the tail's shape only when BLOCK_N == 64")
    gl.static_assert(D_V == 2 * D_HALF, "the consumer layouts are for d_v = 512")
    dtype: gl.constexpr = gl.bfloat16
    q_main_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, D_V], dtype)
    q_tail_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, D_TAIL], dtype)
    kv_main_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], dtype)
    kv_tail_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_TAIL], dtype)
    row_smem_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])

    # Q tile [64, D_V + D_TAIL] into shared memory (token-major rows) by cp.async from the even
    # warpgroup: 144 registers per thread if staged through registers, which spilled.
    load_layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [WARPGROUP_WARPS, 1], [1, 0])
    group = _group_index(LONGEST_FIRST)
    offs_m = gl.arange(0, BLOCK_M, gl.SliceLayout(1, load_layout))
    q_row = q_ptr + (group * G + offs_m // H)[:, None] * stride_qt + (offs_m % H)[:, None] * stride_qh
    offs_d = gl.arange(0, D_V, gl.SliceLayout(0, load_layout))
    offs_r = gl.arange(0, D_TAIL, gl.SliceLayout(0, load_layout))
    # [1, ...]: the consumers index them with a zero computed in their loop (see _loop_zero)
    q_main = gl.allocate_shared_memory(dtype, [1, BLOCK_M, D_V], q_main_layout)
    q_tail = gl.allocate_shared_memory(dtype, [1, BLOCK_M, D_TAIL], q_tail_layout)
    async_copy.async_copy_global_to_shared(q_main.index(0), q_row + offs_d[None, :] * stride_qd)
    async_copy.async_copy_global_to_shared(q_tail.index(0), q_row + (D_V + offs_r)[None, :] * stride_qd)
    async_copy.commit_group()
    main_bufs = gl.allocate_shared_memory(dtype, [2, BLOCK_N, D_V], kv_main_layout)
    tail_bufs = gl.allocate_shared_memory(dtype, [2, BLOCK_N, D_TAIL], kv_tail_layout)
    max_bufs = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M], row_smem_layout)
    sum_bufs = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M], row_smem_layout)
    full_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    pub_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    sum_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(full_bars.index(i), count=PRODUCER_WARPS * 32)
        mbarrier.init(empty_bars.index(i), count=2)  # one arrive from each consumer warpgroup
        mbarrier.init(pub_bars.index(i), count=1)
        mbarrier.init(sum_bars.index(i), count=1)
    async_copy.wait_group(0)
    gl.thread_barrier()  # every thread's part of Q has landed
    fence_async_shared()  # Q and the barriers, for the async proxy (wgmma, cp.async arrivals)

    # The producer is the default partition (the launch's warps), the two consumer warpgroups are
    # workers with CONSUMER_REGS registers each: as the default partition, the even warpgroup spilled.
    gl.warp_specialize([
        (_pair_producer, (kv_ptr, rows_ptr, len_ptr, stride_kvs, stride_rg, main_bufs, tail_bufs, full_bars,
                          empty_bars, D_V, D_TAIL, BLOCK_N, PRODUCER_WARPS, KV_INT64, LONGEST_FIRST, KNOCKOUT)),
        (_even_consumer, (q_main, q_tail, bits_ptr, len_ptr, out_ptr, stride_bg, stride_ot, stride_oh, stride_od,
                          qk_scale_log2, main_bufs, tail_bufs, full_bars, empty_bars, pub_bars, max_bufs, sum_bufs,
                          sum_bars, H, G, D_V, BLOCK_N, LONGEST_FIRST, ODD_OVERLAP, KNOCKOUT, trace_ptr, TRACE)),
        (_odd_consumer, (q_main, q_tail, bits_ptr, len_ptr, out_ptr, stride_bg, stride_ot, stride_oh, stride_od,
                          qk_scale_log2, main_bufs, tail_bufs, full_bars, empty_bars, pub_bars, max_bufs, sum_bufs,
                          sum_bars, H, G, D_V, BLOCK_N, LONGEST_FIRST, ODD_OVERLAP, KNOCKOUT, trace_ptr, TRACE)),
    ], [WARPGROUP_WARPS, WARPGROUP_WARPS], [CONSUMER_REGS, CONSUMER_REGS])
