"""Gluon kernel (Hopper only): the split 64-row union tile (warp specialisation).

Same contract and result as the Triton union tile at G*H = 64, but warps run side by side (docs/performance.md,
"Why warp specialisation"): a producer partition (few registers) waits for a free stage, loads the block's row
numbers and issues cp.async gathers of its KV rows (main and rope tail), which arrive on the stage's `full`
barrier; the consumers (two warpgroups, each owning half of the D_V columns) wait on `full`, compute S = Q K^T by
warpgroup MMA, the masked online softmax and O += P V, then release the stage (`empty`). The next blocks' gathers
thus fly while this block computes; the compiled Triton loop cannot (it waits for every copy at each iteration).
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

from glmcheck.kernels.gluon.common import group_index

BLOCK_M = gl.constexpr(64)  # query rows per program: one warpgroup MMA tile (G * H)
CONSUMER_WARPS = gl.constexpr(8)  # two warpgroups; each holds [64, D_V / 2] of the fp32 accumulator


@gluon.jit
def _gather_block(kv_ptr, rows_ptr, start, length, stride_kvs, main_buf, tail_buf,
                  D_V: gl.constexpr, D_TAIL: gl.constexpr, BLOCK_N: gl.constexpr,
                  WARPS: gl.constexpr, KV_INT64: gl.constexpr):
    """Issue cp.async copies of union rows [start, start + BLOCK_N) into one stage (zeros past `length`)."""
    main_layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [WARPS, 1], [1, 0])
    tail_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [WARPS, 1], [1, 0])
    offs_n = start + gl.arange(0, BLOCK_N, gl.SliceLayout(1, main_layout))
    live = offs_n < length
    rows = gl.load(rows_ptr + offs_n, mask=live, other=0)
    if KV_INT64:
        row_off = rows.to(gl.int64) * stride_kvs
    else:
        row_off = rows * stride_kvs
    offs_d = gl.arange(0, D_V, gl.SliceLayout(0, main_layout))
    async_copy.async_copy_global_to_shared(main_buf, kv_ptr + row_off[:, None] + offs_d[None, :], mask=live[:, None])
    tail_n = start + gl.arange(0, BLOCK_N, gl.SliceLayout(1, tail_layout))
    tail_live = tail_n < length
    tail_rows = gl.convert_layout(row_off, gl.SliceLayout(1, tail_layout))
    offs_r = D_V + gl.arange(0, D_TAIL, gl.SliceLayout(0, tail_layout))
    async_copy.async_copy_global_to_shared(tail_buf, kv_ptr + tail_rows[:, None] + offs_r[None, :],
                                           mask=tail_live[:, None])


@gluon.jit
def _producer(kv_ptr, rows_ptr, len_ptr, stride_kvs, stride_rg, main_bufs, tail_bufs, full_bars, empty_bars,
              D_V: gl.constexpr, D_TAIL: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
              WARPS: gl.constexpr, KV_INT64: gl.constexpr):
    """Worker partition: fill the stages in order, NUM_STAGES blocks ahead of the consumers."""
    group = group_index()
    length = gl.load(len_ptr + group)
    union_rows = rows_ptr + group * stride_rg
    num_blocks = gl.cdiv(length, BLOCK_N)
    for block in range(num_blocks):
        stage = block % NUM_STAGES
        # A fresh barrier counts as having completed the phase before phase 0, so the first
        # NUM_STAGES waits (parity 1) pass at once.
        mbarrier.wait(empty_bars.index(stage), ((block // NUM_STAGES) & 1) ^ 1)
        _gather_block(kv_ptr, union_rows, block * BLOCK_N, length, stride_kvs,
                      main_bufs.index(stage), tail_bufs.index(stage), D_V, D_TAIL, BLOCK_N, WARPS, KV_INT64)
        async_copy.mbarrier_arrive(full_bars.index(stage), increment_count=False)


@gluon.jit
def _consumer(q_main, q_tail, bits_ptr, len_ptr, out_ptr, stride_bg, stride_ot, stride_oh, stride_od,
              qk_scale_log2, main_bufs, tail_bufs, full_bars, empty_bars,
              H: gl.constexpr, G: gl.constexpr, D_V: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr):
    """Default partition (8 warps): attention over the stages the producer fills; writes out."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 2], [16, BLOCK_N // 2, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout([3, 0], [4, 2], [16, D_V // 2, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(0, o_layout, 2)
    group = group_index()
    length = gl.load(len_ptr + group)
    union_bits = bits_ptr + group * stride_bg
    member = gl.arange(0, BLOCK_M, gl.SliceLayout(1, s_layout)) // H
    lanes = gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, D_V], gl.float32, o_layout)
    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    num_blocks = gl.cdiv(length, BLOCK_N)
    for block in range(num_blocks):
        stage = block % NUM_STAGES
        offs_n = block * BLOCK_N + lanes
        live = offs_n < length
        bits = gl.load(union_bits + offs_n, mask=live, other=0).to(gl.int32)
        mbarrier.wait(full_bars.index(stage), (block // NUM_STAGES) & 1)
        fence_async_shared()  # cp.async wrote through the generic proxy; wgmma reads through the async one
        kv_main = main_bufs.index(stage)
        scores = warpgroup_mma(q_main, kv_main.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        scores = warpgroup_mma(q_tail, tail_bufs.index(stage).permute((1, 0)), scores, is_async=True)
        scores = warpgroup_mma_wait(0, deps=(scores,))
        owned = (((bits[None, :] >> member[:, None]) & 1) != 0) & live[None, :]
        scores = gl.where(owned, scores * qk_scale_log2, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(scores, 1))
        shift = gl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = gl.exp2(m_i - shift)
        p = gl.exp2(scores - shift[:, None])
        l_i = l_i * alpha + gl.sum(p, 1)
        m_i = m_new
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
        p_op = gl.convert_layout(p.to(gl.bfloat16), p_layout)
        acc = warpgroup_mma(p_op, kv_main, acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty_bars.index(stage))

    denom = gl.convert_layout(gl.where(l_i > 0.0, l_i, 1.0), gl.SliceLayout(1, o_layout))
    out = (acc / denom[:, None]).to(gl.bfloat16)
    offs_m = gl.arange(0, BLOCK_M, gl.SliceLayout(1, o_layout))
    token = group * G + offs_m // H
    head = offs_m % H
    offs_d = gl.arange(0, D_V, gl.SliceLayout(0, o_layout))
    gl.store(out_ptr + token[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :] * stride_od, out)


@gluon.jit
def sparse_mla_union_split_kernel(
    q_ptr, kv_ptr, rows_ptr, bits_ptr, len_ptr, out_ptr,
    stride_qt, stride_qh, stride_qd, stride_kvs, stride_rg, stride_bg, stride_ot, stride_oh, stride_od, qk_scale_log2,
    H: gl.constexpr, G: gl.constexpr, D_V: gl.constexpr, D_TAIL: gl.constexpr,
    BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, PRODUCER_WARPS: gl.constexpr,
    PRODUCER_REGS: gl.constexpr, KV_INT64: gl.constexpr,
):
    """Grid (num_groups,); launch with num_warps=CONSUMER_WARPS. kv rows contiguous (stride 1 along D).
    rows/bits/len from the union build (rows in [0, S))."""
    gl.static_assert(G * H == BLOCK_M, "the warp-specialised tile holds exactly 64 query rows")
    dtype: gl.constexpr = gl.bfloat16
    q_main_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, D_V], dtype)
    q_tail_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, D_TAIL], dtype)
    kv_main_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], dtype)
    kv_tail_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_TAIL], dtype)

    # Q tile [64, D_V + D_TAIL] into shared memory (token-major rows), by the consumer warps.
    load_layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [CONSUMER_WARPS, 1], [1, 0])
    group = group_index()
    offs_m = gl.arange(0, BLOCK_M, gl.SliceLayout(1, load_layout))
    q_row = q_ptr + (group * G + offs_m // H)[:, None] * stride_qt + (offs_m % H)[:, None] * stride_qh
    offs_d = gl.arange(0, D_V, gl.SliceLayout(0, load_layout))
    offs_r = gl.arange(0, D_TAIL, gl.SliceLayout(0, load_layout))
    q_main = gl.allocate_shared_memory(dtype, [BLOCK_M, D_V], q_main_layout,
                                       gl.load(q_row + offs_d[None, :] * stride_qd))
    q_tail = gl.allocate_shared_memory(dtype, [BLOCK_M, D_TAIL], q_tail_layout,
                                       gl.load(q_row + (D_V + offs_r)[None, :] * stride_qd))
    main_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, D_V], kv_main_layout)
    tail_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, D_TAIL], kv_tail_layout)
    full_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for stage in gl.static_range(NUM_STAGES):
        mbarrier.init(full_bars.index(stage), count=PRODUCER_WARPS * 32)
        mbarrier.init(empty_bars.index(stage), count=1)
    fence_async_shared()

    gl.warp_specialize([
        (_consumer, (q_main, q_tail, bits_ptr, len_ptr, out_ptr, stride_bg, stride_ot, stride_oh, stride_od,
                     qk_scale_log2, main_bufs, tail_bufs, full_bars, empty_bars, H, G, D_V, BLOCK_N, NUM_STAGES)),
        (_producer, (kv_ptr, rows_ptr, len_ptr, stride_kvs, stride_rg, main_bufs, tail_bufs, full_bars, empty_bars,
                     D_V, D_TAIL, BLOCK_N, NUM_STAGES, PRODUCER_WARPS, KV_INT64)),
    ], [PRODUCER_WARPS], [PRODUCER_REGS])
