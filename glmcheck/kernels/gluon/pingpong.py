"""Gluon kernel (Hopper only): the 64-row union tile with two ping-pong consumer warpgroups.

One group of G adjacent tokens per program, G*H = 64 token-major query rows, ownership bits mask foreign rows (the
union contract of the Triton union tile). The two consumer warpgroups split the work by KV block, not by column (a
column split measured slower at every G: docs/performance.md, "Which 64-row tile per group"):
  * the even warpgroup takes union blocks 0, 2, 4, ..., the odd one blocks 1, 3, 5, ...; each computes its own
    block's full S = Q K^T ([64, 64]: one 64-wide warpgroup MMA) and its softmax;
  * both own half of the output columns (fp32 accumulator [64, 256] each), so each block's P goes to both: its
    owner keeps P in registers and stores it (bf16) for the other warpgroup's MMA: the even one in its block's
    rope-tail buffer (nothing reads it once S is done), the odd one in a buffer of its own;
  * one running row max M: block b's max is max(M after block b-1, rowmax S_b), so the warpgroups pass M through
    shared memory, one after the other. While one runs its softmax, the other's MMAs keep the tensor cores busy.
    Each max is handed over alone, as soon as its softmax is done; the P blocks are exchanged after both maxima
    are known, both against the pair's max M1 (the even warpgroup moves its P0, kept in registers, from M0 to M1;
    its own O += P0 V0 has used it against M0 already): "Ping-pong handoffs";
  * block b lands in stage b % 2 in pieces, each with a barrier pair and a single last reader, and each piece is
    refilled as soon as that reader is done: L = columns [0, 256), read last by the even warpgroup's O += P V;
    R = columns [256, 512), read last by the odd one's; the rope tail, with R in stage 0 (where P0 then lives,
    read last by the odd warpgroup's O += P0 V0) and a piece of its own (T) in stage 1, read only by S1. Each
    warpgroup starts S on the piece the producer fills first for it. With an odd block count the last pair is a
    half pair: its even block alone, P0 against M0, and the odd warpgroup only adds P0 V0 (no odd block).
Per block pair, with phase = pair % 2 on every barrier (pieces 0L 0R 1L 1R 1T; max[w] carries warpgroup w's max,
pub[w] its P):
  even: S0 on 0R (its left half, on 0L, was issued in the previous pair; the first pair's before the loop);
        softmax with M_prev; publish M0 (max[0]); O *= alpha; O += P0 V0[:, :256] from registers; wait for it
        (release 0L); wait max[1]; P0 *= 2^(M0 - M1), stored in stage 0's tail (pub[0]); O *= 2^(M0 - M1);
        wait pub[1]; O += P1 V1[:, :256]; the next pair's S0 on 0L once refilled (none in the last pair); wait
        for O += P1 V1 (release 1L), then for that left half
  odd:  S1 on 1R, 1T, then 1L; wait for it (release 1T); wait max[0]; softmax with M0; publish M1 (max[1]);
        O *= alpha; O += P1 V1[:, 256:] from registers; store P1; wait pub[0]; O += P0 V0[:, 256:]; publish P1
        (pub[1]); wait for O += P1 V1 (release 1R), then for O += P0 V0 (release 0R)
  producer: 0L 1T 1R 0R 1L, the order the pieces are freed in ("Ping-pong stage pieces and fill order").
tests/support/pingpong_protocol.py models this protocol (waits, arrives, buffer reads and writes) and checks it
for races under random interleavings on the CPU: change the two together. Each warpgroup's row sums cover its own
blocks; they are added through shared memory at the end, after which each warpgroup stages its normalised O half in
stage 0's half it reads last (even 0L, odd 0R) and stores it in 16-byte row pieces (`write_out`). One-token groups
(G = 1, the per-token path) run per 64-head slice (`tile_index`). Launcher: `glmcheck.kernels.gluon.launch` (every
union group and the per-token path).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

from glmcheck.kernels.gluon.pingpong_consumers import even_consumer, odd_consumer
from glmcheck.kernels.gluon.pingpong_producer import copy_q, pair_producer
from glmcheck.kernels.gluon.pingpong_shared import BLOCK_M, D_HALF, NUM_PIECES, WARPGROUP_WARPS, tile_index


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
    """Shared memory for the Q tile: (main columns [1, 64, D_V], rope tail [1, 64, D_TAIL]), bf16; the leading
    dimension of one lets the odd warpgroup index Q like the stages (`_first_stage`)."""
    dtype: gl.constexpr = gl.bfloat16
    q_main = gl.allocate_shared_memory(dtype, [1, BLOCK_M, D_V],
                                       gl.NVMMASharedLayout.get_default_for([BLOCK_M, D_V], dtype))
    q_tail = gl.allocate_shared_memory(dtype, [1, BLOCK_M, D_TAIL],
                                       gl.NVMMASharedLayout.get_default_for([BLOCK_M, D_TAIL], dtype))
    return q_main, q_tail


@gluon.jit
def _allocate_stages(D_V: gl.constexpr, D_TAIL: gl.constexpr, BLOCK_N: gl.constexpr):
    """Shared memory for the two KV stages (main columns, rope tails), the odd warpgroup's P, and the running
    maxima and row sums the warpgroups exchange."""
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
    """The two max handoffs' mbarriers (one per warpgroup), initialised. Allocated last: allocated with the other
    barriers, the shifted shared-memory offsets cost the producer's pair loop 9 spill loads (ptxas, H = 64)."""
    max_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(max_bars.index(i), count=1)
    return max_bars


@gluon.jit
def sparse_mla_union_pingpong_kernel(
    q_ptr, kv_ptr, rows_ptr, bits_ptr, len_ptr, out_ptr,
    stride_qt, stride_qh, stride_qd, stride_kvs, stride_rg, stride_bg, stride_ot, stride_oh, stride_od,
    qk_scale_log2, num_heads,
    H: gl.constexpr, G: gl.constexpr, D_V: gl.constexpr, D_TAIL: gl.constexpr, BLOCK_N: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, KV_INT64: gl.constexpr, HEAD_SLICES: gl.constexpr = 1,
    PARTIAL_HEADS: gl.constexpr = False,
):
    """Grid (num_groups,); launch with num_warps=WARPGROUP_WARPS. kv rows contiguous (stride 1 along D).
    rows/bits/len from the union build (rows in [0, S); rows contiguous, since the producer takes stride_rg as
    their width). Grid (num_groups * HEAD_SLICES,) with G = 1 and H = 64 tile rows per token: a token's num_heads
    heads run as HEAD_SLICES slices of 64 (`tile_index`), PARTIAL_HEADS when num_heads is not a multiple of 64
    (the last slice's missing heads are zero-padded rows, never stored); with G > 1, num_heads = H."""
    _assert_tile_shape(H, G, D_V, D_TAIL, BLOCK_N, HEAD_SLICES, PARTIAL_HEADS)
    # Q tile [64, D_V + D_TAIL] into shared memory (token-major rows) by cp.async: 144 registers per thread if
    # staged through registers, which spilled. Nothing waits for it here: the default warps issue it and then run
    # the producer, whose first barrier arrive per piece covers every earlier copy of the thread, Q's included, so
    # each consumer's first S waits for Q too, while the first gathers already run under Q's latency.
    group, head0 = tile_index(HEAD_SLICES)
    q_main, q_tail = _allocate_q(D_V, D_TAIL)
    copy_q(q_ptr, group, head0, num_heads, stride_qt, stride_qh, stride_qd, q_main.index(0), q_tail.index(0), H, G,
            D_V, D_TAIL, PARTIAL_HEADS)
    main_bufs, tail_bufs, odd_p, max_bufs, sum_bufs = _allocate_stages(D_V, D_TAIL, BLOCK_N)
    full_bars, empty_bars, pub_bars, sum_bars = _init_barriers()
    max_bars = _init_max_barriers()
    gl.thread_barrier()  # the barriers are initialised before any partition uses them
    fence_async_shared()  # the barriers, for the async proxy (cp.async arrivals)

    # The producer is the default partition (the launch's warps); the two consumer warpgroups are
    # workers with CONSUMER_REGS registers each.
    gl.warp_specialize([
        (pair_producer, (kv_ptr, rows_ptr, len_ptr, stride_kvs, stride_rg, main_bufs, tail_bufs, full_bars,
                          empty_bars, D_TAIL, BLOCK_N, KV_INT64, HEAD_SLICES)),
        (even_consumer, (q_main, q_tail, bits_ptr, len_ptr, out_ptr, stride_bg, stride_ot, stride_oh, stride_od,
                          qk_scale_log2, main_bufs, tail_bufs, odd_p, full_bars, empty_bars, pub_bars, max_bars,
                          max_bufs, sum_bufs, sum_bars, num_heads, H, G, BLOCK_N, HEAD_SLICES, PARTIAL_HEADS)),
        (odd_consumer, (q_main, q_tail, bits_ptr, len_ptr, out_ptr, stride_bg, stride_ot, stride_oh, stride_od,
                         qk_scale_log2, main_bufs, tail_bufs, odd_p, full_bars, empty_bars, pub_bars, max_bars,
                         max_bufs, sum_bufs, sum_bars, num_heads, H, G, BLOCK_N, HEAD_SLICES, PARTIAL_HEADS)),
    ], [WARPGROUP_WARPS, WARPGROUP_WARPS], [CONSUMER_REGS, CONSUMER_REGS])
