"""The fp32 exact reference on the tensor cores: a Triton form of `glmcheck.backends.reference` (dtype fp32).

Each program owns one token and up to 16 heads. Pass 1 takes the max of the token's scores over its valid slots;
pass 2 recomputes them, adds p = exp(s - max) into the normaliser and p . V into the output; out = acc / l. The
arithmetic is fp32's without IEEE fp32 dot products (which the H200 runs on its FMA units, 2.3x slower than the
torch form at layer 0: docs/performance.md, "Time to verdict"):

- scores: q and the rows are bf16 values, so a bf16 MMA with fp32 accumulation forms every product exactly and
  sums in fp32, as an fp32 dot would;
- p . V: p is fp32, so it is split exactly into three bf16 parts, p = hi + mid + lo + r with |r| <= 2^-24 |p|
  (hi = bf16(p), mid = bf16(p - hi), lo = bf16(p - hi - mid); each difference exact in fp32), and the three bf16
  MMAs with V (bf16) form exact products summed in fp32.

So it differs from the torch form only in the order of fp32 sums, the 2^-24 remainder of p and one division at the
end: fp32 rounding, five orders below the band's bf16 noise. A token with no valid slot gives zeros; a NaN or Inf
in q or a selected row reaches the output; an unselected slot is never read.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from glmcheck.backends.band_triton import block_scores  # exact products, fp32 sums (TILE 0: one accumulation)
from glmcheck.kernels.device_helpers import round_to_bf16
from glmcheck.kernels.runtime import interpreter_active

HEADS_PER_PROGRAM = 16
SLOTS_PER_STEP = 64


@triton.jit
def _valid(idx_ptr, token, stride_it, slots, end, num_rows):
    rows = tl.load(idx_ptr + token * stride_it + slots, mask=slots < end, other=-1)
    ok = (slots < end) & (rows >= 0) & (rows < num_rows)
    return tl.where(ok, rows, 0).to(tl.int64), ok


@triton.jit
def _split_dot(p, v, acc, UPCAST: tl.constexpr):
    """acc + p . v with p [M, N] fp32 split into three bf16 parts (module docstring), v [N, D] bf16 values."""
    hi = round_to_bf16(p, UPCAST)
    rest = p - hi.to(tl.float32)
    mid = round_to_bf16(rest, UPCAST)
    lo = round_to_bf16(rest - mid.to(tl.float32), UPCAST)
    acc = tl.dot(hi, v, acc)
    acc = tl.dot(mid, v, acc)
    return tl.dot(lo, v, acc)


@triton.jit(do_not_specialize=["num_heads", "num_rows", "topk", "stride_it"])
def _reference_kernel(q_ptr, kv_ptr, idx_ptr, len_ptr, out_ptr, num_heads, num_rows, topk, sm_scale,
                      stride_qt, stride_qh, stride_kv, stride_it,
                      HAS_LENGTH: tl.constexpr, D_V: tl.constexpr, D_TAIL: tl.constexpr, DC: tl.constexpr,
                      BLOCK_H: tl.constexpr, SUB: tl.constexpr, UPCAST: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = heads < num_heads
    q_tok = q_ptr + token * stride_qt
    end = topk
    if HAS_LENGTH:
        end = tl.minimum(tl.maximum(tl.load(len_ptr + token), 0), topk)
    m = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    for start in range(0, end, SUB):
        rows, ok = _valid(idx_ptr, token, stride_it, start + tl.arange(0, SUB), end, num_rows)
        s = block_scores(q_tok, kv_ptr, rows, ok, heads, head_ok, stride_qh, stride_kv, sm_scale,
                    D_V, D_TAIL, DC, BLOCK_H, SUB, UPCAST, 0)
        m = tl.maximum(m, tl.max(s, axis=1))
    base = tl.where(m == float("-inf"), 0.0, m)
    dims = tl.arange(0, D_V)
    l = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_H, D_V), dtype=tl.float32)
    for start in range(0, end, SUB):
        rows, ok = _valid(idx_ptr, token, stride_it, start + tl.arange(0, SUB), end, num_rows)
        s = block_scores(q_tok, kv_ptr, rows, ok, heads, head_ok, stride_qh, stride_kv, sm_scale,
                    D_V, D_TAIL, DC, BLOCK_H, SUB, UPCAST, 0)
        p = tl.exp(s - base[:, None])
        l += tl.sum(p, axis=1)
        v = tl.load(kv_ptr + rows[:, None] * stride_kv + dims[None, :], mask=ok[:, None], other=0.0)
        if UPCAST:
            v = v.to(tl.float32)
        acc = _split_dot(p, v, acc, UPCAST)
    # no valid slot: zeros; NaN stays (l != l: the NaN test inside a Triton kernel)
    out = tl.where(((l > 0.0) | (l != l))[:, None], acc / l[:, None], 0.0)  # noqa: PLR0124
    tl.store(out_ptr + (token * num_heads + heads)[:, None] * D_V + dims[None, :], out, mask=head_ok[:, None])


def reference_fp32(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, topk_length: torch.Tensor | None,
                   sm_scale: float, d_v: int) -> torch.Tensor:
    """[T, H, d_v] fp32: the exact reference (module docstring) of q [T, H, D] bf16, kv [S, D] bf16, indices [T, K]
    int32 and topk_length [T] int32 or None, on one CUDA device (or the interpreter)."""
    num_tokens, num_heads, d_qk = q.shape
    out = torch.empty((num_tokens, num_heads, d_v), dtype=torch.float32, device=q.device)
    if num_tokens == 0:
        return out
    q, kv, indices = q.contiguous(), kv.contiguous(), indices.contiguous()
    length = topk_length.contiguous() if topk_length is not None else indices  # unread without HAS_LENGTH
    grid = (num_tokens, triton.cdiv(num_heads, HEADS_PER_PROGRAM))
    _reference_kernel[grid](
        q, kv, indices, length, out, num_heads, kv.shape[0], indices.shape[1], float(sm_scale),
        q.stride(0), q.stride(1), kv.stride(0), indices.stride(0),
        HAS_LENGTH=topk_length is not None, D_V=d_v, D_TAIL=d_qk - d_v, DC=min(d_v, 64),
        BLOCK_H=HEADS_PER_PROGRAM, SUB=SLOTS_PER_STEP, UPCAST=interpreter_active(), num_warps=4)
    return out
