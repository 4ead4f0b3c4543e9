"""The ping-pong tile's producer partition: Q's copy and the gathers of each block pair into the
stage pieces, in the order the consumers free them (protocol: `pingpong.py`)."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from glmcheck.kernels.gluon.pingpong_shared import (
    BLOCK_M,
    D_HALF,
    LEFT,
    MAIN_GATHER,
    ODD_TAIL,
    RIGHT,
    half_index,
    tile_index,
)


@gluon.jit
def _scaled_rows(rows, stride_kvs, KV_INT64: gl.constexpr):
    """Element offsets of KV rows `rows` (int32 row numbers), int64 with KV_INT64. One return after the branch:
    Gluon's code generator rejects branches that return different types."""
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
    """Block's row numbers loaded before the group's length is known (int32 [BLOCK_N], 0 past the row width
    `row_width`; entries past the length are unspecified and masked later)."""
    offs_n = _block_rows(block, BLOCK_N)
    return gl.load(rows_ptr + offs_n, mask=offs_n < row_width, other=0)


@gluon.jit
def _gather_tail(kv_ptr, row_off, live, tail_buf, D_TAIL: gl.constexpr):
    """cp.async a block's rope tail (columns [512, 512 + D_TAIL); zeros for rows that are not live), in MAIN_GATHER
    like the main columns, so the row offsets need no layout conversion."""
    offs_r = 2 * D_HALF + gl.arange(0, D_TAIL, gl.SliceLayout(0, MAIN_GATHER))
    async_copy.async_copy_global_to_shared(tail_buf, kv_ptr + row_off[:, None] + offs_r[None, :], mask=live[:, None])


@gluon.jit
def _gather_half(kv_ptr, row_off, live, main_buf, tail_buf, half: gl.constexpr, D_TAIL: gl.constexpr,
                 WITH_TAIL: gl.constexpr):
    """cp.async one half of a block into its stage: L = main columns [0, 256), R = [256, 512) and, WITH_TAIL, the
    rope tail (zeros for rows that are not live)."""
    offs_d = half * D_HALF + gl.arange(0, D_HALF, gl.SliceLayout(0, MAIN_GATHER))
    async_copy.async_copy_global_to_shared(main_buf.slice(half * D_HALF, D_HALF, dim=1),
                                           kv_ptr + row_off[:, None] + offs_d[None, :], mask=live[:, None])
    if half == RIGHT and WITH_TAIL:
        _gather_tail(kv_ptr, row_off, live, tail_buf, D_TAIL)


@gluon.jit
def _fill_half(kv_ptr, row_off, live, main_bufs, tail_bufs, full_bars, empty_bars, stage: gl.constexpr,
               half: gl.constexpr, phase, D_TAIL: gl.constexpr, WITH_TAIL: gl.constexpr):
    """Wait until a stage half is free (a fresh barrier counts as free), gather into it, and have each thread's
    copies arrive on its full barrier when they land."""
    mbarrier.wait(empty_bars.index(half_index(stage, half)), phase ^ 1)
    _gather_half(kv_ptr, row_off, live, main_bufs.index(stage), tail_bufs.index(stage), half, D_TAIL, WITH_TAIL)
    async_copy.mbarrier_arrive(full_bars.index(half_index(stage, half)), increment_count=False)


@gluon.jit
def _fill_odd_tail(kv_ptr, row_off, live, tail_bufs, full_bars, empty_bars, phase, D_TAIL: gl.constexpr):
    """As _fill_half, for stage 1's rope tail, a piece of its own."""
    mbarrier.wait(empty_bars.index(ODD_TAIL), phase ^ 1)
    _gather_tail(kv_ptr, row_off, live, tail_bufs.index(1), D_TAIL)
    async_copy.mbarrier_arrive(full_bars.index(ODD_TAIL), increment_count=False)


@gluon.jit
def copy_q(q_ptr, group, head0, num_heads, stride_qt, stride_qh, stride_qd, q_main, q_tail, H: gl.constexpr,
            G: gl.constexpr, D_V: gl.constexpr, D_TAIL: gl.constexpr, PARTIAL_HEADS: gl.constexpr):
    """cp.async a group's Q tile [64, D_V + D_TAIL] (token-major rows, heads from head0) into shared memory, as one
    committed copy group. PARTIAL_HEADS: rows of heads at or past num_heads are padding, filled with zeros (their
    scores are 0, finite; `_store_half` drops their output)."""
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
               D_TAIL: gl.constexpr, BLOCK_N: gl.constexpr, KV_INT64: gl.constexpr):
    """Gather blocks 2 pair and 2 pair + 1 of a union group (`_fill_pair_at`)."""
    even_off, even_live = _row_offsets(union_rows, 2 * pair, length, stride_kvs, BLOCK_N, KV_INT64)
    odd_off, odd_live = _row_offsets(union_rows, 2 * pair + 1, length, stride_kvs, BLOCK_N, KV_INT64)
    _fill_pair_at(kv_ptr, even_off, even_live, odd_off, odd_live, main_bufs, tail_bufs, full_bars, empty_bars, phase,
                  D_TAIL)


@gluon.jit
def _fill_pair_at(kv_ptr, even_off, even_live, odd_off, odd_live, main_bufs, tail_bufs, full_bars, empty_bars, phase,
                  D_TAIL: gl.constexpr):
    """Gather a pair's two blocks from their row offsets and live masks, in the order the pieces are freed: 0L, 1T,
    1R (without the tail), 0R (with stage 0's tail), 1L. The even block's offsets are held across the odd block's
    fills: 4 rows a thread (MAIN_GATHER) fit the producer's 56 registers (with 8, ptxas spilled 21-24 loads a pair)."""
    _fill_half(kv_ptr, even_off, even_live, main_bufs, tail_bufs, full_bars, empty_bars, 0, LEFT, phase, D_TAIL, True)
    _fill_odd_tail(kv_ptr, odd_off, odd_live, tail_bufs, full_bars, empty_bars, phase, D_TAIL)
    _fill_half(kv_ptr, odd_off, odd_live, main_bufs, tail_bufs, full_bars, empty_bars, 1, RIGHT, phase, D_TAIL, False)
    _fill_half(kv_ptr, even_off, even_live, main_bufs, tail_bufs, full_bars, empty_bars, 0, RIGHT, phase, D_TAIL, True)
    _fill_half(kv_ptr, odd_off, odd_live, main_bufs, tail_bufs, full_bars, empty_bars, 1, LEFT, phase, D_TAIL, True)


@gluon.jit
def _fill_even_block(kv_ptr, even_off, even_live, main_bufs, tail_bufs, full_bars, empty_bars, phase,
                     D_TAIL: gl.constexpr):
    """A half pair's gathers: only the even block, 0L then 0R with stage 0's tail (the group's last pair when its
    block count is odd; the consumers compute no odd block: docs/performance.md, "Half pairs")."""
    _fill_half(kv_ptr, even_off, even_live, main_bufs, tail_bufs, full_bars, empty_bars, 0, LEFT, phase, D_TAIL, True)
    _fill_half(kv_ptr, even_off, even_live, main_bufs, tail_bufs, full_bars, empty_bars, 0, RIGHT, phase, D_TAIL, True)


@gluon.jit
def pair_producer(kv_ptr, rows_ptr, len_ptr, stride_kvs, stride_rg, main_bufs, tail_bufs, full_bars, empty_bars,
                   D_TAIL: gl.constexpr, BLOCK_N: gl.constexpr, KV_INT64: gl.constexpr, HEAD_SLICES: gl.constexpr):
    """Default partition: every pair of the program's union group (`_fill_pair`). The first pair's row numbers are
    loaded alongside the group's length, not after it (rows are contiguous, so stride_rg is their width): one
    dependent global round trip less before the first gather, of the three (length, rows, gather) at a program's
    start: 1.02x at H = 64, 1 x 8192, 1.03-1.04x at 1 x 2048 (docs/performance.md, "Early row loads"). Entries
    past the length are unspecified and masked ("Rows past a set's length"). With an odd block count the last pair
    gathers its even block alone (`_fill_even_block`)."""
    group, _ = tile_index(HEAD_SLICES)
    union_rows = rows_ptr + group * stride_rg
    even_rows = _early_rows(union_rows, 0, stride_rg, BLOCK_N)
    odd_rows = _early_rows(union_rows, 1, stride_rg, BLOCK_N)
    length = gl.load(len_ptr + group)
    num_blocks = gl.cdiv(length, BLOCK_N)
    if num_blocks > 1:
        _fill_pair_at(kv_ptr, _scaled_rows(even_rows, stride_kvs, KV_INT64), _live(0, length, BLOCK_N),
                      _scaled_rows(odd_rows, stride_kvs, KV_INT64), _live(1, length, BLOCK_N), main_bufs, tail_bufs,
                      full_bars, empty_bars, 0, D_TAIL)
    elif num_blocks == 1:
        _fill_even_block(kv_ptr, _scaled_rows(even_rows, stride_kvs, KV_INT64), _live(0, length, BLOCK_N), main_bufs,
                         tail_bufs, full_bars, empty_bars, 0, D_TAIL)
    for pair in range(1, num_blocks // 2):
        _fill_pair(kv_ptr, union_rows, length, stride_kvs, main_bufs, tail_bufs, full_bars, empty_bars, pair,
                   pair & 1, D_TAIL, BLOCK_N, KV_INT64)
    half = num_blocks // 2  # the half pair's index, when the block count is odd
    if (num_blocks % 2 == 1) & (half > 0):
        even_off, even_live = _row_offsets(union_rows, 2 * half, length, stride_kvs, BLOCK_N, KV_INT64)
        _fill_even_block(kv_ptr, even_off, even_live, main_bufs, tail_bufs, full_bars, empty_bars, half & 1, D_TAIL)
    async_copy.wait_group(0)  # Q's copies (committed as a group) have landed before the program can end
