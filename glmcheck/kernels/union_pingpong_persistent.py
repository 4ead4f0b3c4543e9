"""Gluon kernel (Hopper only): the ping-pong tile (`union_pingpong.py`), persistent.

Same contract and result as `union_pingpong.sparse_mla_union_pingpong_kernel`, and the same
pipeline per block pair (its helpers), but a fixed grid of at most one program per SM walks the
union groups (work item w = program, program + grid, ...; longest group first with LONGEST_FIRST)
instead of one program per group. What that buys (docs/performance.md, note 49): in the
one-program-per-group tile a program spends ~20 000 cycles (12 % of its time at H = 64) outside
its steady pairs: from entry to its first full stage (the group's length, its row indices, then
the first gather, one after the other) and in its first and last pairs, and nothing else runs on
the SM meanwhile. Here the producer reads the next group's length and rows and gathers its first
blocks while the consumers finish the current group.

What changes against the one-group tile:
  * the barrier phases run on across groups: every partition counts the pairs it has done;
  * Q is reloaded per group into the same buffer. The producer waits on `q_free` (both consumer
    warpgroups arrive once their group's last S is done) before it copies the next group's Q, and
    copies it before that group's first gather, so each consumer's first full-stage wait covers Q
    (a piece's barrier arrive covers every earlier copy of the producer thread);
  * the row-sum exchange of `_write_out` uses its barriers' phase per group written;
  * an empty group (length 0) has no pairs, no Q and no exchange: each consumer stores zeros.
tests/pingpong_protocol.py models this schedule too (several groups per program, empty ones
among them): change the two together.

Needs triton.experimental.gluon as in triton 3.6 and an sm_90 GPU. Launcher:
`glmcheck.kernels.union_ws_launch.launch_pingpong` with `WsConfig(persistent=True)`.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
)

from glmcheck.kernels.union_pingpong import (
    BLOCK_M,
    D_HALF,
    O_LAYOUT,
    ROW_LAYOUT,
    S_LAYOUT,
    WARPGROUP_WARPS,
    _allocate_q,
    _allocate_stages,
    _allocate_stamps,
    _assert_tile_shape,
    _consumer_start,
    _copy_q,
    _even_blocks,
    _even_scores,
    _fill_pair,
    _flush_stamps,
    _init_barriers,
    _odd_blocks,
    _odd_scores,
    _stamp_program,
    _store_half,
    _write_out,
)


@gluon.jit
def _work_group(work, num_groups, LONGEST_FIRST: gl.constexpr):
    """The union group of work item `work`: the longest first (the last group) with LONGEST_FIRST."""
    group = work.to(gl.int64)
    if LONGEST_FIRST:
        group = num_groups - 1 - group
    return group


@gluon.jit
def _persistent_producer(q_ptr, kv_ptr, rows_ptr, len_ptr, num_groups, stride_qt, stride_qh, stride_qd, stride_kvs,
                         stride_rg, q_main, q_tail, main_bufs, tail_bufs, full_bars, empty_bars, q_free,
                         H: gl.constexpr, G: gl.constexpr, D_V: gl.constexpr, D_TAIL: gl.constexpr,
                         BLOCK_N: gl.constexpr, KV_INT64: gl.constexpr, LONGEST_FIRST: gl.constexpr, trace_ptr,
                         TRACE: gl.constexpr):
    """Default partition: for each of the program's groups, its Q (once the consumers are done with
    the previous one's), then every pair (`_fill_pair`)."""
    pairs_done = 0
    loaded = 0  # groups whose Q has been copied
    for work in range(gl.program_id(0), num_groups, gl.num_programs(0)):
        group = _work_group(work, num_groups, LONGEST_FIRST)
        _stamp_program(trace_ptr, group, 0, 0, 0, TRACE)
        _stamp_program(trace_ptr, group, 0, 1, 1, TRACE)
        _stamp_program(trace_ptr, group, 0, 4, 2, TRACE)
        length = gl.load(len_ptr + group)
        if length > 0:
            if loaded > 0:
                mbarrier.wait(q_free, (loaded - 1) & 1)  # the previous group's last S, in both consumers
            _copy_q(q_ptr, group, stride_qt, stride_qh, stride_qd, q_main, q_tail, H, G, D_V, D_TAIL)
            loaded += 1
        union_rows = rows_ptr + group * stride_rg
        for pair in range(gl.cdiv(length, 2 * BLOCK_N)):
            _fill_pair(kv_ptr, union_rows, length, stride_kvs, main_bufs, tail_bufs, full_bars, empty_bars, pair,
                       pairs_done & 1, D_TAIL, BLOCK_N, KV_INT64)
            pairs_done += 1
    async_copy.wait_group(0)  # the last Q copy has landed before the program can end


@gluon.jit
def _persistent_even(q_main, q_tail, bits_ptr, len_ptr, out_ptr, num_groups, stride_bg, stride_ot, stride_oh,
                     stride_od, qk_scale_log2, main_bufs, tail_bufs, odd_p, full_bars, empty_bars, pub_bars, max_bufs,
                     sum_bufs, sum_bars, q_free, H: gl.constexpr, G: gl.constexpr, BLOCK_N: gl.constexpr,
                     LONGEST_FIRST: gl.constexpr, BITS_EARLY: gl.constexpr, stamps, trace_ptr,
                     TRACE: gl.constexpr):
    """Worker partition: blocks 0, 2, 4, ... and output columns [0, D_V / 2) of each of the
    program's groups."""
    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_LAYOUT)
    pairs_done = 0
    written = 0  # groups whose row sums were exchanged (the sum barriers' phase)
    for work in range(gl.program_id(0), num_groups, gl.num_programs(0)):
        group = _work_group(work, num_groups, LONGEST_FIRST)
        length, union_bits, run_max, row_sum, acc, bits = _consumer_start(bits_ptr, len_ptr, stride_bg, group, 0,
                                                                          BLOCK_N)
        num_pairs = gl.cdiv(length, 2 * BLOCK_N)
        for pair in range(num_pairs):
            phase = pairs_done & 1
            scores = _even_scores(q_main, q_tail, main_bufs, tail_bufs, full_bars, zero_s, phase, stamps, pair,
                                  TRACE)
            if pair == num_pairs - 1:
                mbarrier.arrive(q_free)  # this group's last read of Q is done
            acc, row_sum, run_max, bits = _even_blocks(scores, bits, acc, row_sum, run_max, main_bufs, tail_bufs,
                                                       odd_p, empty_bars, pub_bars, max_bufs, qk_scale_log2, phase,
                                                       union_bits, length, stamps, pair, H, BLOCK_N,
                                                       BITS_EARLY, TRACE)
            pairs_done += 1
        if length > 0:
            _write_out(acc, row_sum, sum_bufs.index(0), sum_bufs.index(1), sum_bars.index(0), sum_bars.index(1),
                       written & 1, out_ptr, group, 0, stride_ot, stride_oh, stride_od, H, G, O_LAYOUT, ROW_LAYOUT)
            written += 1
        else:
            _store_half(gl.zeros([BLOCK_M, D_HALF], gl.bfloat16, O_LAYOUT), out_ptr, group, 0, stride_ot, stride_oh,
                        stride_od, H, G, O_LAYOUT)
        _flush_stamps(stamps, trace_ptr, group, 0, num_pairs, TRACE)
        _stamp_program(trace_ptr, group, 0, 2, 0, TRACE)
        _stamp_program(trace_ptr, group, 0, 3, 1, TRACE)


@gluon.jit
def _persistent_odd(q_main, q_tail, bits_ptr, len_ptr, out_ptr, num_groups, stride_bg, stride_ot, stride_oh,
                    stride_od, qk_scale_log2, main_bufs, tail_bufs, odd_p, full_bars, empty_bars, pub_bars, max_bufs,
                    sum_bufs, sum_bars, q_free, H: gl.constexpr, G: gl.constexpr, BLOCK_N: gl.constexpr,
                    LONGEST_FIRST: gl.constexpr, stamps, trace_ptr, TRACE: gl.constexpr):
    """Worker partition: blocks 1, 3, 5, ... and output columns [D_V / 2, D_V) of each of the
    program's groups."""
    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_LAYOUT)
    pairs_done = 0
    written = 0
    for work in range(gl.program_id(0), num_groups, gl.num_programs(0)):
        group = _work_group(work, num_groups, LONGEST_FIRST)
        length, union_bits, run_max, row_sum, acc, bits = _consumer_start(bits_ptr, len_ptr, stride_bg, group, 1,
                                                                          BLOCK_N)
        num_pairs = gl.cdiv(length, 2 * BLOCK_N)
        for pair in range(num_pairs):
            phase = pairs_done & 1
            scores, peer_max, acc, row_sum = _odd_scores(q_main, q_tail, main_bufs, tail_bufs, full_bars,
                                                         empty_bars, pub_bars, max_bufs, zero_s, acc, row_sum,
                                                         run_max, phase, stamps, pair, TRACE)
            if pair == num_pairs - 1:
                mbarrier.arrive(q_free)  # this group's last read of Q is done
            acc, row_sum, run_max, bits = _odd_blocks(scores, bits, peer_max, acc, row_sum, main_bufs, odd_p,
                                                      empty_bars, pub_bars, max_bufs, qk_scale_log2, union_bits,
                                                      length, stamps, pair, H, BLOCK_N, TRACE)
            pairs_done += 1
        if length > 0:
            _write_out(acc, row_sum, sum_bufs.index(1), sum_bufs.index(0), sum_bars.index(1), sum_bars.index(0),
                       written & 1, out_ptr, group, D_HALF, stride_ot, stride_oh, stride_od, H, G, O_LAYOUT,
                       ROW_LAYOUT)
            written += 1
        else:
            _store_half(gl.zeros([BLOCK_M, D_HALF], gl.bfloat16, O_LAYOUT), out_ptr, group, D_HALF, stride_ot,
                        stride_oh, stride_od, H, G, O_LAYOUT)
        _flush_stamps(stamps, trace_ptr, group, 1, num_pairs, TRACE)
        _stamp_program(trace_ptr, group, 1, 2, 0, TRACE)
        _stamp_program(trace_ptr, group, 1, 3, 1, TRACE)


@gluon.jit
def sparse_mla_union_pingpong_persistent_kernel(
    q_ptr, kv_ptr, rows_ptr, bits_ptr, len_ptr, out_ptr,
    stride_qt, stride_qh, stride_qd, stride_kvs,
    stride_rg, stride_bg,
    stride_ot, stride_oh, stride_od,
    qk_scale_log2, num_groups,
    H: gl.constexpr, G: gl.constexpr, D_V: gl.constexpr, D_TAIL: gl.constexpr, BLOCK_N: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, KV_INT64: gl.constexpr, LONGEST_FIRST: gl.constexpr = False,
    BITS_EARLY: gl.constexpr = False, trace_ptr=None, TRACE: gl.constexpr = False,
):
    """Grid (min(num_groups, SMs),); launch with num_warps=WARPGROUP_WARPS. Arguments as the
    one-group kernel's, plus num_groups (the union groups, rows of rows/bits/len). trace_ptr
    (diagnostic, TRACE): as the one-group kernel's, one row per group; the entry stamps are the
    producer's start on the group."""
    _assert_tile_shape(H, G, D_V, D_TAIL, BLOCK_N)
    q_main, q_tail = _allocate_q(D_V, D_TAIL)
    main_bufs, tail_bufs, odd_p, max_bufs, sum_bufs = _allocate_stages(D_V, D_TAIL, BLOCK_N)
    full_bars, empty_bars, pub_bars, sum_bars = _init_barriers()
    q_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(q_free, count=2)  # both consumer warpgroups' last S of a group
    stamps = _allocate_stamps(TRACE)
    gl.thread_barrier()  # the barriers are initialised before any partition uses them
    fence_async_shared()  # the barriers, for the async proxy (cp.async arrivals)

    gl.warp_specialize([
        (_persistent_producer, (q_ptr, kv_ptr, rows_ptr, len_ptr, num_groups, stride_qt, stride_qh, stride_qd,
                                stride_kvs, stride_rg, q_main, q_tail, main_bufs, tail_bufs, full_bars, empty_bars,
                                q_free, H, G, D_V, D_TAIL, BLOCK_N, KV_INT64, LONGEST_FIRST, trace_ptr, TRACE)),
        (_persistent_even, (q_main, q_tail, bits_ptr, len_ptr, out_ptr, num_groups, stride_bg, stride_ot, stride_oh,
                            stride_od, qk_scale_log2, main_bufs, tail_bufs, odd_p, full_bars, empty_bars, pub_bars,
                            max_bufs, sum_bufs, sum_bars, q_free, H, G, BLOCK_N, LONGEST_FIRST, BITS_EARLY, stamps,
                            trace_ptr, TRACE)),
        (_persistent_odd, (q_main, q_tail, bits_ptr, len_ptr, out_ptr, num_groups, stride_bg, stride_ot, stride_oh,
                           stride_od, qk_scale_log2, main_bufs, tail_bufs, odd_p, full_bars, empty_bars, pub_bars,
                           max_bufs, sum_bufs, sum_bars, q_free, H, G, BLOCK_N, LONGEST_FIRST, stamps, trace_ptr,
                           TRACE)),
    ], [WARPGROUP_WARPS, WARPGROUP_WARPS], [CONSUMER_REGS, CONSUMER_REGS])
