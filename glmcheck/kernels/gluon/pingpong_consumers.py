"""The ping-pong tile's two consumer partitions: each warpgroup's scores, softmax, handoffs and
O += P V per block pair, and the write-out (protocol: `pingpong.py`; per-row state: `pingpong_rows.py`)."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from glmcheck.kernels.gluon.pingpong_rows import (
    consumer_start,
    load_bits,
    publish_max,
    publish_p,
    rescale,
    rescale_factor,
    signal_p,
    softmax_block,
    write_out,
)
from glmcheck.kernels.gluon.pingpong_shared import (
    BLOCK_M,
    D_HALF,
    LEFT,
    O_LAYOUT,
    ODD_TAIL,
    P_LAYOUT,
    RIGHT,
    ROW_LAYOUT,
    S_LAYOUT,
    half_index,
    tile_index,
)


@gluon.jit
def _first_stage(length, pair):
    """0, from values the compiler cannot bound ((length + pair) >> 31: both non-negative, their sum
    far below 2**31): the index of stage 0 (and of Q) in a pair. Views indexed by it are not
    loop-invariant, so their wgmma descriptors are built in the pair instead of hoisted and spilled
    (docs/performance.md, "Wgmma descriptors built in the loop": 1.05x at H = 64, 1.11x at union 8)."""
    return (length + pair) >> 31


@gluon.jit
def _wait_piece(full_bars, index: gl.constexpr, phase):
    """Wait until the stage piece with barrier `index` has landed (this pair's phase)."""
    mbarrier.wait(full_bars.index(index), phase)
    fence_async_shared()  # cp.async wrote through the generic proxy; wgmma reads through the async one


@gluon.jit
def _wait_half(full_bars, stage: gl.constexpr, half: gl.constexpr, phase):
    """Wait until a stage half has landed (this pair's phase)."""
    _wait_piece(full_bars, half_index(stage, half), phase)


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
def _even_scores_left(q_main, main_bufs, full_bars, zero_s, stage0, phase):
    """Issue the even warpgroup's S0 left half, Q[:, :256] K0[:, :256]^T (async, not waited for), once 0L of this
    `phase` has landed (before the loop, and in each pair for the next). stage0: `_first_stage`."""
    _wait_half(full_bars, 0, LEFT, phase)
    return _scores_left(q_main, main_bufs.index(stage0), zero_s, False)


@gluon.jit
def _even_scores_rest(q_main, q_tail, main_bufs, tail_bufs, full_bars, scores, stage0, phase):
    """The even warpgroup's S0 (fp32 [64, 64]) from its finished left half `scores`: the right half and the rope
    tail once 0R has landed, waited for. Trace event 0 is 0R's wait here."""
    _wait_half(full_bars, 0, RIGHT, phase)
    scores = _scores_right(q_main, q_tail, main_bufs.index(stage0), tail_bufs.index(stage0), scores, True)
    scores = warpgroup_mma_wait(0, deps=(scores,))
    return scores


@gluon.jit
def _even_own_block(scores, bits, acc, row_sum, run_max, main_bufs, max_bars, max_bufs, qk_scale_log2, stage0,
                    H: gl.constexpr):
    """The even warpgroup's own block, after S0, as full and half pairs share it: softmax against the running max,
    M0 published, O and the row sums moved to M0, O += P0 V0[:, :256] issued from registers (not waited for).
    -> (acc, row_sum, M0, P0 in fp32)."""
    new_max, p = softmax_block(scores, bits, run_max, qk_scale_log2, H)
    publish_max(new_max, max_bufs.index(0), max_bars.index(0))
    acc, row_sum = rescale(acc, row_sum, run_max, new_max, O_LAYOUT)
    row_sum += gl.sum(p, 1)
    acc = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), P_LAYOUT),
                        main_bufs.index(stage0).slice(0, D_HALF, dim=1), acc, is_async=True)
    return acc, row_sum, new_max, p


@gluon.jit
def _even_blocks(scores, bits, acc, row_sum, run_max, main_bufs, tail_bufs, odd_p, empty_bars, pub_bars, max_bars,
                 max_bufs, qk_scale_log2, phase, union_bits, length, pair, H: gl.constexpr,
                 G: gl.constexpr, BLOCK_N: gl.constexpr, zero_s, q_main, full_bars, stage0, NEXT_LEFT: gl.constexpr):
    """The rest of the even warpgroup's pair after S0 (the protocol's "even" line in `pingpong.py`), with NEXT_LEFT
    the next pair's S0 left half (`_even_scores_left`) issued behind O += P1 V1. Returns (acc, row_sum, run_max =
    M1, the bits of the warpgroup's next block, loaded at the end: see `load_bits`; that left half, or zero_s
    without NEXT_LEFT). stage0: `_first_stage`."""
    acc, row_sum, new_max, p = _even_own_block(scores, bits, acc, row_sum, run_max, main_bufs, max_bars, max_bufs,
                                               qk_scale_log2, stage0, H)
    # 0L's last read is this O += P0 V0: free it before waiting on the odd warpgroup
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index(half_index(0, LEFT)))
    mbarrier.wait(max_bars.index(1), phase)
    pair_max = max_bufs.index(1).load(ROW_LAYOUT)
    # P0 in the rope-tail buffer of stage 0 (S0, its only other reader, is done)
    publish_p((p * rescale_factor(new_max, pair_max)[:, None]).to(gl.bfloat16), tail_bufs.index(stage0),
              pub_bars.index(0))
    acc, row_sum = rescale(acc, row_sum, new_max, pair_max, O_LAYOUT)
    mbarrier.wait(pub_bars.index(1), phase)
    acc = warpgroup_mma(odd_p, main_bufs.index(stage0 + 1).slice(0, D_HALF, dim=1), acc, is_async=True)
    next_scores = zero_s
    if NEXT_LEFT:
        next_scores = _even_scores_left(q_main, main_bufs, full_bars, zero_s, stage0, phase ^ 1)
        acc = warpgroup_mma_wait(1, deps=(acc,))  # O += P1 V1, the older group: 1L's last read
    else:
        acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index(half_index(1, LEFT)))
    if NEXT_LEFT:
        next_scores = warpgroup_mma_wait(0, deps=(next_scores,))
    bits = load_bits(union_bits, 2 * pair + 2, length, G, BLOCK_N, S_LAYOUT)
    return acc, row_sum, pair_max, bits, next_scores


@gluon.jit
def _even_half_pair(scores, bits, acc, row_sum, run_max, main_bufs, tail_bufs, pub_bars, max_bars, max_bufs,
                    qk_scale_log2, H: gl.constexpr):
    """The even warpgroup's half pair, the group's last when its block count is odd (there is no odd block):
    after S0, publish M0, O += P0 V0[:, :256] from registers and P0 for the odd warpgroup's columns, all against
    M0, the pair's max. Bit for bit the full pair over an all-masked odd block (docs/performance.md, "Half pairs").
    -> (acc, row_sum)."""
    acc, row_sum, _, p = _even_own_block(scores, bits, acc, row_sum, run_max, main_bufs, max_bars, max_bufs,
                                         qk_scale_log2, 0, H)
    publish_p(p.to(gl.bfloat16), tail_bufs.index(0), pub_bars.index(0))  # S0, the tail's only other reader, is done
    acc = warpgroup_mma_wait(0, deps=(acc,))
    return acc, row_sum


@gluon.jit
def _even_pairs(q_main, q_tail, main_bufs, tail_bufs, odd_p, full_bars, empty_bars, pub_bars, max_bars, max_bufs,
                zero_s, acc, row_sum, run_max, bits, union_bits, length, qk_scale_log2, H: gl.constexpr,
                G: gl.constexpr, BLOCK_N: gl.constexpr):
    """The even warpgroup's pairs -> (acc, row_sum): each pair but the last issues the next pair's S0 left half behind
    its O += P1 V1 (`_even_blocks`); the first pair's is issued here and the last pair runs after the loop without
    one, as a half pair (`_even_half_pair`) when the block count is odd. In the loop, Q and the stages are indexed
    with `_first_stage`: the left half carried across the loop keeps 32 more registers live, and with hoisted
    descriptors ptxas spilled 86 loads a pair here."""
    num_blocks = gl.cdiv(length, BLOCK_N)
    num_pairs = gl.cdiv(num_blocks, 2)
    if num_pairs > 0:
        scores = warpgroup_mma_wait(0, deps=(_even_scores_left(q_main.index(0), main_bufs, full_bars, zero_s, 0, 0),))
        for pair in range(num_pairs - 1):
            phase = pair & 1
            stage0 = _first_stage(length, pair)
            q_view = q_main.index(stage0)
            scores = _even_scores_rest(q_view, q_tail.index(stage0), main_bufs, tail_bufs, full_bars, scores, stage0,
                                       phase)
            acc, row_sum, run_max, bits, scores = _even_blocks(
                scores, bits, acc, row_sum, run_max, main_bufs, tail_bufs, odd_p, empty_bars, pub_bars, max_bars,
                max_bufs, qk_scale_log2, phase, union_bits, length, pair, H, G, BLOCK_N, zero_s, q_view,
                full_bars, stage0, True)
        last = num_pairs - 1
        scores = _even_scores_rest(q_main.index(0), q_tail.index(0), main_bufs, tail_bufs, full_bars, scores, 0,
                                   last & 1)
        if num_blocks % 2 == 1:
            acc, row_sum = _even_half_pair(scores, bits, acc, row_sum, run_max, main_bufs, tail_bufs, pub_bars,
                                           max_bars, max_bufs, qk_scale_log2, H)
        else:
            acc, row_sum, run_max, bits, scores = _even_blocks(
                scores, bits, acc, row_sum, run_max, main_bufs, tail_bufs, odd_p, empty_bars, pub_bars, max_bars,
                max_bufs, qk_scale_log2, last & 1, union_bits, length, last, H, G, BLOCK_N, zero_s,
                q_main.index(0), full_bars, 0, False)
    return acc, row_sum


@gluon.jit
def _odd_scores(q_main, q_tail, main_bufs, tail_bufs, full_bars, empty_bars, zero_s, phase, stage0):
    """The odd warpgroup's whole S1 [64, 64] fp32 of one pair (1R, 1T, then 1L), waited for; frees 1T, read by S1
    only. stage0: `_first_stage`; q_main and q_tail are the Q views it indexed."""
    own_main = main_bufs.index(stage0 + 1)
    _wait_half(full_bars, 1, RIGHT, phase)
    scores = _scores_right_main(q_main, own_main, zero_s, False)
    _wait_piece(full_bars, ODD_TAIL, phase)
    scores = _scores_tail(q_tail, tail_bufs.index(stage0 + 1), scores)
    _wait_half(full_bars, 1, LEFT, phase)
    scores = _scores_left(q_main, own_main, scores, True)
    scores = warpgroup_mma_wait(0, deps=(scores,))
    mbarrier.arrive(empty_bars.index(ODD_TAIL))
    return scores


@gluon.jit
def _odd_blocks(scores, bits, acc, row_sum, run_max, main_bufs, tail_bufs, odd_p, empty_bars, pub_bars, max_bars,
                max_bufs, qk_scale_log2, union_bits, length, phase, stage0, pair, H: gl.constexpr,
                G: gl.constexpr, BLOCK_N: gl.constexpr):
    """The rest of the odd warpgroup's pair after S1 (the protocol's "odd" line in `pingpong.py`; P0 lives in stage
    0's tail, read last here). Returns (acc, row_sum, run_max = M1, the bits of the warpgroup's next block, loaded
    at the end: loading them earlier cost spill loads and stores, ptxas at H = 64)."""
    mbarrier.wait(max_bars.index(0), phase)
    peer_max = max_bufs.index(0).load(ROW_LAYOUT)
    new_max, p = softmax_block(scores, bits, peer_max, qk_scale_log2, H)
    publish_max(new_max, max_bufs.index(1), max_bars.index(1))
    acc, row_sum = rescale(acc, row_sum, run_max, new_max, O_LAYOUT)
    row_sum += gl.sum(p, 1)
    p_bf16 = p.to(gl.bfloat16)
    acc = warpgroup_mma(gl.convert_layout(p_bf16, P_LAYOUT), main_bufs.index(stage0 + 1).slice(D_HALF, D_HALF, dim=1),
                        acc, is_async=True)
    # odd_p's last reader, the even warpgroup's O += P1 V1 of the previous pair, freed 1L, which this pair's S1
    # waited for. P1 is published only after O += P0 V0 is queued: published before the wait for P0 instead, it
    # measured 0.99x ("Ping-pong handoffs").
    odd_p.store(p_bf16)
    mbarrier.wait(pub_bars.index(0), phase)
    acc = warpgroup_mma(tail_bufs.index(stage0), main_bufs.index(stage0).slice(D_HALF, D_HALF, dim=1), acc,
                        is_async=True)
    signal_p(pub_bars.index(1))
    acc = warpgroup_mma_wait(1, deps=(acc,))  # O += P1 V1[:, 256:]: 1R's last read
    mbarrier.arrive(empty_bars.index(half_index(1, RIGHT)))
    acc = warpgroup_mma_wait(0, deps=(acc,))  # O += P0 V0[:, 256:]: 0R's (and P0's) last read
    mbarrier.arrive(empty_bars.index(half_index(0, RIGHT)))
    bits = load_bits(union_bits, 2 * pair + 3, length, G, BLOCK_N, S_LAYOUT)
    return acc, row_sum, new_max, bits


@gluon.jit
def _odd_half_pair(acc, row_sum, run_max, main_bufs, tail_bufs, pub_bars, max_bars, max_bufs, phase):
    """The odd warpgroup's half pair (no odd block: `_even_half_pair`): move O and the row sums to M0, then
    O += P0 V0[:, 256:] once P0 is there. -> (acc, row_sum)."""
    mbarrier.wait(max_bars.index(0), phase)
    acc, row_sum = rescale(acc, row_sum, run_max, max_bufs.index(0).load(ROW_LAYOUT), O_LAYOUT)
    mbarrier.wait(pub_bars.index(0), phase)
    acc = warpgroup_mma(tail_bufs.index(0), main_bufs.index(0).slice(D_HALF, D_HALF, dim=1), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    return acc, row_sum


@gluon.jit
def even_consumer(q_main, q_tail, bits_ptr, len_ptr, out_ptr, stride_bg, stride_ot, stride_oh, stride_od,
                   qk_scale_log2, main_bufs, tail_bufs, odd_p, full_bars, empty_bars, pub_bars, max_bars, max_bufs,
                   sum_bufs, sum_bars, num_heads, H: gl.constexpr, G: gl.constexpr, BLOCK_N: gl.constexpr,
                   HEAD_SLICES: gl.constexpr, PARTIAL_HEADS: gl.constexpr):
    """Worker partition (one warpgroup): blocks 0, 2, 4, ... and columns [0, D_V / 2); q_main, q_tail [1, ...] views."""
    group, head0 = tile_index(HEAD_SLICES)
    length, union_bits, run_max, row_sum, acc, bits = consumer_start(bits_ptr, len_ptr, stride_bg, group, 0, G,
                                                                      BLOCK_N)
    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_LAYOUT)
    acc, row_sum = _even_pairs(q_main, q_tail, main_bufs, tail_bufs, odd_p, full_bars, empty_bars,
                                        pub_bars, max_bars, max_bufs, zero_s, acc, row_sum, run_max, bits,
                                        union_bits, length, qk_scale_log2, H, G, BLOCK_N)
    write_out(acc, row_sum, sum_bufs.index(0), sum_bufs.index(1), sum_bars.index(0), sum_bars.index(1), 0,
               out_ptr, group, head0, num_heads, 0, stride_ot, stride_oh, stride_od,
               main_bufs.index(0).slice(0, D_HALF, dim=1), H, G, PARTIAL_HEADS, ROW_LAYOUT)


@gluon.jit
def odd_consumer(q_main, q_tail, bits_ptr, len_ptr, out_ptr, stride_bg, stride_ot, stride_oh, stride_od,
                  qk_scale_log2, main_bufs, tail_bufs, odd_p, full_bars, empty_bars, pub_bars, max_bars, max_bufs,
                  sum_bufs, sum_bars, num_heads, H: gl.constexpr, G: gl.constexpr, BLOCK_N: gl.constexpr,
                  HEAD_SLICES: gl.constexpr, PARTIAL_HEADS: gl.constexpr):
    """Worker partition (one warpgroup): blocks 1, 3, 5, ... and output columns [D_V / 2, D_V).
    q_main, q_tail: [1, ...] views (`_first_stage` indexes them)."""
    group, head0 = tile_index(HEAD_SLICES)
    length, union_bits, run_max, row_sum, acc, bits = consumer_start(bits_ptr, len_ptr, stride_bg, group, 1, G,
                                                                      BLOCK_N)
    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_LAYOUT)
    num_blocks = gl.cdiv(length, BLOCK_N)
    for pair in range(num_blocks // 2):
        phase = pair & 1
        stage0 = _first_stage(length, pair)
        scores = _odd_scores(q_main.index(stage0), q_tail.index(stage0), main_bufs, tail_bufs, full_bars,
                             empty_bars, zero_s, phase, stage0)
        acc, row_sum, run_max, bits = _odd_blocks(scores, bits, acc, row_sum, run_max, main_bufs, tail_bufs, odd_p,
                                                  empty_bars, pub_bars, max_bars, max_bufs, qk_scale_log2,
                                                  union_bits, length, phase, stage0, pair, H, G, BLOCK_N)
    if num_blocks % 2 == 1:  # a half pair last
        acc, row_sum = _odd_half_pair(acc, row_sum, run_max, main_bufs, tail_bufs, pub_bars, max_bars, max_bufs,
                                      (num_blocks // 2) & 1)
    write_out(acc, row_sum, sum_bufs.index(1), sum_bufs.index(0), sum_bars.index(1), sum_bars.index(0), 0,
               out_ptr, group, head0, num_heads, D_HALF, stride_ot, stride_oh, stride_od,
               main_bufs.index(0).slice(D_HALF, D_HALF, dim=1), H, G, PARTIAL_HEADS, ROW_LAYOUT)

