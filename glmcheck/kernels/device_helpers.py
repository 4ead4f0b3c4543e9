"""Device helpers shared by the kernels: bf16 rounding, one online-softmax step, a token's loop bound, and the
compacting append and sorted-list search of the union builds."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def round_to_bf16(x, UPCAST: tl.constexpr):
    """Round fp32 `x` to bf16 with round-to-nearest-even, as the GPU's cvt does (there a plain cast to bf16).
    In the CPU interpreter (UPCAST) the cast truncates, so the rounding is done on the bits and the result stays
    fp32 (every value exactly representable in bf16, so a later cast to bf16 is exact). Finite inputs only."""
    if UPCAST:
        bits = x.to(tl.uint32, bitcast=True)
        bias = ((bits >> 16) & 1) + 0x7FFF
        rounded = (bits + bias) & 0xFFFF0000
        return rounded.to(tl.float32, bitcast=True)
    else:
        return x.to(tl.bfloat16)


@triton.jit
def valid_slot_end(idx_row, stride_ik, topk, num_kv_rows, BLOCK: tl.constexpr):
    """1 + the last slot of one token's index row that holds a row in [0, num_kv_rows), or 0: the host's
    `effective_lengths` bound, from one pass over the row (BLOCK slots per step) in the kernel that reads it again."""
    end = tl.zeros([], dtype=tl.int32)
    for start in range(0, topk, BLOCK):
        slots = start + tl.arange(0, BLOCK)
        rows = tl.load(idx_row + slots * stride_ik, mask=slots < topk, other=-1)
        in_span = (rows >= 0) & (rows < num_kv_rows)
        end = tl.maximum(end, tl.max(tl.where(in_span, slots + 1, 0), axis=0))
    return end


@triton.jit
def online_softmax_step(scores, values, m_i, l_i, acc, UPCAST: tl.constexpr):
    """Fold one block of base-2 scores [M, N] and values [N, D] into the running state: m_i [M] running max,
    l_i [M] running denominator, acc [M, D] running numerator, all fp32. Masked scores are -inf; a row that has
    seen only -inf keeps m_i = -inf, l_i = 0, acc = 0 (no NaN: the shift falls back to 0). P is rounded to bf16
    for the PV product (in the interpreter it stays fp32 holding bf16 values, so both worlds round alike)."""
    m_new = tl.maximum(m_i, tl.max(scores, 1))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - shift)
    p = tl.exp2(scores - shift[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(round_to_bf16(p, UPCAST), values, acc * alpha[:, None])
    return m_new, l_i, acc


@triton.jit
def gather_kv_rows(kv_ptr, rows, live, offs_d, offs_r, tail_ok, stride_kvs, stride_kvd,
                   D_V: tl.constexpr, KV_INT64: tl.constexpr, UPCAST: tl.constexpr):
    """Gather KV rows `rows` [N]: the main [N, D_V] part and the rope tail [N, TAIL_PAD] (columns D_V + offs_r
    where tail_ok), zeros where not `live`; row offsets in int64 when KV_INT64; fp32 when UPCAST (interpreter)."""
    if KV_INT64:
        row_off = rows.to(tl.int64) * stride_kvs
    else:
        row_off = rows * stride_kvs
    kv_row = kv_ptr + row_off[:, None]
    kv_main = tl.load(kv_row + offs_d[None, :] * stride_kvd, mask=live[:, None], other=0.0)
    kv_tail = tl.load(kv_row + (D_V + offs_r)[None, :] * stride_kvd, mask=live[:, None] & tail_ok[None, :], other=0.0)
    if UPCAST:
        kv_main = kv_main.to(tl.float32)
        kv_tail = kv_tail.to(tl.float32)
    return kv_main, kv_tail


@triton.jit
def append_rows(out_rows, out_bits, emitted, keep, row, bits, limit):
    """Append row[keep] and bits[keep] (as uint8) after the first `emitted` outputs, in lane order (prefix-sum
    compaction); positions at or past `limit` are never written. Returns the new count."""
    flag = keep.to(tl.int32)
    position = emitted + tl.cumsum(flag, axis=0) - 1
    fits = keep & (position < limit)
    tl.store(out_rows + position, row, mask=fits)
    tl.store(out_bits + position, bits.to(tl.uint8), mask=fits)
    return emitted + tl.sum(flag, axis=0)


@triton.jit
def lower_bound(sorted_row, count, needle, FILL: tl.constexpr, SEARCH_STEPS: tl.constexpr):
    """Per lane, the first index in sorted_row[0:count] whose value is >= needle (count when none).
    SEARCH_STEPS >= ceil(log2(count + 1)); probes past `count` are never read (FILL stands in)."""
    lo = tl.zeros_like(needle)
    hi = tl.zeros_like(needle) + count
    for _ in tl.static_range(SEARCH_STEPS):
        active = lo < hi
        mid = (lo + hi) >> 1
        probe = tl.load(sorted_row + mid, mask=active, other=FILL)
        right = probe < needle
        lo = tl.where(active & right, mid + 1, lo)
        hi = tl.where(active & (~right), mid, hi)
    return lo
