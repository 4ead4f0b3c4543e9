"""The ping-pong tile's per-row state, shared by its two consumer partitions (`pingpong_consumers.py`): the
ownership bits and masks of a block, its softmax, moving O and the row sums to a new max, the handoffs of maxima and
P between the warpgroups, and the write-out (protocol: `pingpong.py`)."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

from glmcheck.kernels.gluon.pingpong_shared import BLOCK_M, D_HALF, O_LAYOUT, OUT_STORE, ROW_LAYOUT, S_LAYOUT


@gluon.jit
def load_bits(union_bits, block, length, G: gl.constexpr, BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
    """Ownership bits of one block's union rows (uint8 [BLOCK_N], 0 past `length`), loaded a pair ahead (a load
    used at once, or in flight at a fence, stalls the warpgroup); at G = 1 the live mask, nothing loaded
    (docs/performance.md, "Ownership bits a pair ahead")."""
    offs_n = block * BLOCK_N + gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
    if G == 1:  # the group's one token owns every live row: the bits are the live mask
        return (offs_n < length).to(gl.uint8)
    return gl.load(union_bits + offs_n, mask=offs_n < length, other=0)


@gluon.jit
def _owned(bits, H: gl.constexpr, s_layout: gl.constexpr):
    """[64, BLOCK_N] mask: the query row's token owns the union row. Every live union row has an owner, and rows
    past the length have no bits, so this is also the live mask."""
    member = gl.arange(0, BLOCK_M, gl.SliceLayout(1, s_layout)) // H
    return ((bits.to(gl.int32)[None, :] >> member[:, None]) & 1) != 0


@gluon.jit
def _shift(row_max):
    """The row max a block's P is taken against: 0 where nothing is live yet (-inf)."""
    return gl.where(row_max == float("-inf"), 0.0, row_max)


@gluon.jit
def rescale_factor(max_from, max_to):
    """Per-row factor that moves values taken against the max `max_from` to the (larger) max `max_to` (`_shift`)."""
    return gl.exp2(max_from - _shift(max_to))


@gluon.jit
def rescale(acc, row_sum, max_from, max_to, o_layout: gl.constexpr):
    """Move O and the row sums from the max `max_from` to the (larger) max `max_to`."""
    alpha = rescale_factor(max_from, max_to)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    return acc, row_sum * alpha


@gluon.jit
def publish_max(row_max, max_buf, bar):
    """Hand this block's running max to the other warpgroup (read by ld.shared: no proxy fence)."""
    max_buf.store(row_max)
    gl.thread_barrier()  # every thread's store is done before the single arrive
    mbarrier.arrive(bar)


@gluon.jit
def publish_p(p, p_buf, bar):
    """Hand a block's P (bf16 [64, BLOCK_N]) to the other warpgroup, whose wgmma reads it."""
    p_buf.store(p)
    signal_p(bar)


@gluon.jit
def signal_p(bar):
    """Arrive on `bar` once this warpgroup's P stores are visible to the peer's wgmma."""
    fence_async_shared()  # P is read by the peer's wgmma (async proxy)
    gl.thread_barrier()  # every thread's stores are done before the single arrive
    mbarrier.arrive(bar)


@gluon.jit
def _store_half(out, out_ptr, group, head0, num_heads, col0, stride_ot, stride_oh, stride_od, H: gl.constexpr,
                G: gl.constexpr, PARTIAL_HEADS: gl.constexpr):
    """Store a warpgroup's half of the output tile (bf16 [64, D_HALF], columns from col0) for the group's G tokens,
    heads from head0 (`tile_index`); PARTIAL_HEADS: rows of heads at or past num_heads are padding, not stored."""
    offs_m = gl.arange(0, BLOCK_M, gl.SliceLayout(1, OUT_STORE))
    token = group * G + offs_m // H
    head = head0 + offs_m % H
    offs_d = col0 + gl.arange(0, D_HALF, gl.SliceLayout(0, OUT_STORE))
    ptrs = out_ptr + token[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :] * stride_od
    if PARTIAL_HEADS:
        gl.store(ptrs, out, mask=(head < num_heads)[:, None])
    else:
        gl.store(ptrs, out)


@gluon.jit
def write_out(acc, row_sum, sum_mine, sum_peer, bar_mine, bar_peer, phase, out_ptr, group, head0, num_heads, col0,
               stride_ot, stride_oh, stride_od, stage_half, H: gl.constexpr, G: gl.constexpr,
               PARTIAL_HEADS: gl.constexpr, row_layout: gl.constexpr):
    """Add the peer's row sums to this warpgroup's, normalise its half of O and store it through `stage_half` (bf16
    [64, D_HALF] of a stage buffer, this warpgroup's own) in 16-byte row pieces: 4-byte stores straight from the MMA
    layout made the end of every program 1.03-1.09x slower (docs/performance.md, "Softmax form and write-out").
    Every stage buffer is free here: the peer's sum arrives after its last MMA, and the producer fills no piece that
    a consumer does not wait for. `phase`: of the sum barriers, 0 for a program's only group."""
    sum_mine.store(row_sum)
    gl.thread_barrier()
    mbarrier.arrive(bar_mine)
    mbarrier.wait(bar_peer, phase)
    total = row_sum + sum_peer.load(row_layout)
    # one reciprocal per row, then a multiply per element: the division per element (div.full.f32) cost ~256 more
    # instructions per thread at the end of every program, with the same rel-L2 against fp64 (docs/performance.md,
    # "Softmax form and write-out")
    inverse = gl.convert_layout(1.0 / gl.where(total > 0.0, total, 1.0), gl.SliceLayout(1, O_LAYOUT))
    stage_half.store((acc * inverse[:, None]).to(gl.bfloat16))
    gl.thread_barrier()  # the warpgroup's rows are in shared memory before any thread reads a row back
    _store_half(stage_half.load(OUT_STORE), out_ptr, group, head0, num_heads, col0, stride_ot, stride_oh, stride_od,
                H, G, PARTIAL_HEADS)


@gluon.jit
def consumer_start(bits_ptr, len_ptr, stride_bg, group, first_block, G: gl.constexpr, BLOCK_N: gl.constexpr):
    """A consumer's (union length, its bits row, running max, row sums, O half, bits of its first block) for a group."""
    length = gl.load(len_ptr + group)
    union_bits = bits_ptr + group * stride_bg
    run_max = gl.full([BLOCK_M], float("-inf"), gl.float32, ROW_LAYOUT)
    row_sum = gl.zeros([BLOCK_M], gl.float32, ROW_LAYOUT)
    acc = gl.zeros([BLOCK_M, D_HALF], gl.float32, O_LAYOUT)
    bits = load_bits(union_bits, first_block, length, G, BLOCK_N, S_LAYOUT)
    return length, union_bits, run_max, row_sum, acc, bits


@gluon.jit
def softmax_block(scores, bits, prev_max, qk_scale_log2, H: gl.constexpr):
    """(new running max, P in fp32) of one block's scores: foreign and dead rows masked, P taken against the new
    max (`_shift`). The scale fused into P's exponent (one FMA) measured 1.006-1.015x faster but less accurate
    against fp64 than FlashMLA, so the unfused form stays (docs/performance.md, "Softmax form and write-out")."""
    logits = gl.where(_owned(bits, H, S_LAYOUT), scores * qk_scale_log2, float("-inf"))
    new_max = gl.maximum(prev_max, gl.max(logits, 1))
    return new_max, gl.exp2(logits - _shift(new_max)[:, None])
