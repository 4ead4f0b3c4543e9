"""Triton probe kernel: gather each token's selected KV rows and sum them (no attention math).

Measures the gather ceiling of the per-token sparse-MLA path: the same row reads (main part and
rope tail of every valid selected row), none of the MMA or softmax work. One program per token;
out[t] = sum of kv[s, :D] over the token's valid slots s (fp32), so the probe's output can be
checked against torch before it is timed.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def gather_sum_kernel(kv_ptr, idx_ptr, len_ptr, out_ptr, num_kv_rows, topk,
                      stride_kvs, stride_it, stride_ot,
                      D: tl.constexpr, BLOCK_N: tl.constexpr):
    """Grid (T,). out[t, :D] = sum over valid slots of kv[row, :D] (fp32)."""
    token = tl.program_id(0).to(tl.int64)
    offs_d = tl.arange(0, D)
    length = tl.minimum(tl.maximum(tl.load(len_ptr + token), 0), topk)
    acc = tl.zeros([D], dtype=tl.float32)
    for start in range(0, length, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        rows = tl.load(idx_ptr + token * stride_it + offs_n, mask=offs_n < length, other=-1)
        valid = (offs_n < length) & (rows >= 0) & (rows < num_kv_rows)
        tile = tl.load(kv_ptr + rows.to(tl.int64)[:, None] * stride_kvs + offs_d[None, :],
                       mask=valid[:, None], other=0.0)
        acc += tl.sum(tile.to(tl.float32), axis=0)
    tl.store(out_ptr + token * stride_ot + offs_d, acc)
