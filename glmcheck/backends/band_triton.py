"""The noise band's flash-style variants as one Triton kernel: the GPU form of `glmcheck.backends.band_kernels`.

Each program owns one token and up to 16 heads and runs the variant's online softmax over that token's slots,
block by block in the variant's order, reading each selected row once per block (no fp32 copy of the rows, no pass
per block over a batch of tokens). Per block the arithmetic is the variant's (`band_kernels` module docstring):
scores from the bf16 q and rows with fp32 accumulation, the block's max taken over all its slots before P is
rounded to bf16 against it, acc = acc * alpha + P.V with fp32 accumulation, l summing the fp32 or the rounded P.
Products of bf16 values are exact in fp32, so the variants differ from the torch form only in the order of the
fp32 sums inside a dot product (the tensor cores' order), which no legitimate kernel pins down: a sample of the
same kernel, not another kernel. A block wider than 64 slots is read as two halves of its slots (scores of both
halves before the max, so P is rounded against the whole block's max).

The kernel writes the fp32 state (m, l, acc) of the slots marked `want` in `part` ([T, K] int8: 0 unselected,
1 and 2 the halves of a split-KV variant, 1 everything otherwise); `band_kernels` merges and finishes the states
as its torch form does. A token with no marked slot in a block skips it: the state would be multiplied by 1 and
get zeros. An unselected slot is never read (a NaN in an unselected row stays out); a NaN or Inf in q or in a
selected row reaches the state.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from glmcheck.kernels.device_helpers import round_to_bf16
from glmcheck.kernels.runtime import interpreter_active

HEADS_PER_PROGRAM = 16  # tl.dot's smallest M; fewer heads are padded with masked rows
HALF_BLOCK = 64  # slots read at once: a [64, d_v] bf16 value tile (64 KiB at d_v = 512)


@triton.jit
def block_scores(q_ptr, kv_ptr, rows, ok, heads, head_ok, stride_qh, stride_kv, sm_scale,
            D_V: tl.constexpr, D_TAIL: tl.constexpr, DC: tl.constexpr, BLOCK_H: tl.constexpr,
            SUB: tl.constexpr, UPCAST: tl.constexpr, TILE: tl.constexpr):
    """[BLOCK_H, SUB] fp32 scores q.k * sm_scale of the slots `rows` [SUB] (-inf where not `ok`); TILE > 0 sums one
    dot product per TILE latent values and one over the rope (`FlashVariant.score_tile`), else one accumulation."""
    s = tl.zeros((BLOCK_H, SUB), dtype=tl.float32)
    part = tl.zeros((BLOCK_H, SUB), dtype=tl.float32)
    for c in tl.static_range(D_V // DC):
        cols = c * DC + tl.arange(0, DC)
        qc = tl.load(q_ptr + heads[:, None] * stride_qh + cols[None, :], mask=head_ok[:, None], other=0.0)
        kc = tl.load(kv_ptr + rows[:, None] * stride_kv + cols[None, :], mask=ok[:, None], other=0.0)
        if UPCAST:  # the interpreter has no bf16 arithmetic
            qc, kc = qc.to(tl.float32), kc.to(tl.float32)
        if TILE > 0:
            part = tl.dot(qc, tl.trans(kc), part)
            if ((c + 1) * DC) % TILE == 0 or (c + 1) * DC == D_V:
                s += part
                part = tl.zeros((BLOCK_H, SUB), dtype=tl.float32)
        else:
            s = tl.dot(qc, tl.trans(kc), s)
    if D_TAIL >= 16:
        cols = D_V + tl.arange(0, D_TAIL)
        qc = tl.load(q_ptr + heads[:, None] * stride_qh + cols[None, :], mask=head_ok[:, None], other=0.0)
        kc = tl.load(kv_ptr + rows[:, None] * stride_kv + cols[None, :], mask=ok[:, None], other=0.0)
        if UPCAST:  # the interpreter has no bf16 arithmetic
            qc, kc = qc.to(tl.float32), kc.to(tl.float32)
        if TILE > 0:
            s += tl.dot(qc, tl.trans(kc))
        else:
            s = tl.dot(qc, tl.trans(kc), s)
    elif D_TAIL > 0:  # a tail narrower than tl.dot's K: products and sums in fp32 (exact products again)
        cols = D_V + tl.arange(0, D_TAIL)
        qc = tl.load(q_ptr + heads[:, None] * stride_qh + cols[None, :], mask=head_ok[:, None], other=0.0)
        kc = tl.load(kv_ptr + rows[:, None] * stride_kv + cols[None, :], mask=ok[:, None], other=0.0)
        s += tl.sum(qc.to(tl.float32)[:, None, :] * kc.to(tl.float32)[None, :, :], axis=2)
    return tl.where(ok[None, :], s * sm_scale, float("-inf"))


# The ints that change between calls stay runtime values (a prompt's top-k and the index rows' stride that follows
# it, which half, which flags): one compiled variant per block size, not one per value class (Triton specialises
# ints equal to 1 or divisible by 16, so each prompt-length class would compile anew: docs/performance.md,
# "Time to verdict").
@triton.jit(do_not_specialize=["num_heads", "topk", "want", "reverse", "sum_rounded", "stride_it", "stride_pt"])
def _band_state_kernel(q_ptr, kv_ptr, idx_ptr, part_ptr, m_ptr, l_ptr, acc_ptr,
                       num_heads, topk, sm_scale, want, reverse, sum_rounded,
                       stride_qt, stride_qh, stride_kv, stride_it, stride_pt,
                       D_V: tl.constexpr, D_TAIL: tl.constexpr, DC: tl.constexpr, BLOCK: tl.constexpr,
                       SUB: tl.constexpr, BLOCK_H: tl.constexpr, UPCAST: tl.constexpr, TILE: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = heads < num_heads
    q_tok = q_ptr + token * stride_qt
    dims = tl.arange(0, D_V)
    m = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    l = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_H, D_V), dtype=tl.float32)
    blocks = tl.cdiv(topk, BLOCK)
    for step in range(blocks):
        block = tl.where(reverse != 0, blocks - 1 - step, step)
        slots_a = block * BLOCK + tl.arange(0, SUB)
        ok_a = tl.load(part_ptr + token * stride_pt + slots_a, mask=slots_a < topk, other=0) == want
        used = tl.sum(ok_a.to(tl.int32), axis=0)
        if BLOCK > SUB:
            slots_b = slots_a + SUB
            ok_b = tl.load(part_ptr + token * stride_pt + slots_b, mask=slots_b < topk, other=0) == want
            used += tl.sum(ok_b.to(tl.int32), axis=0)
        if used > 0:
            rows_a = tl.load(idx_ptr + token * stride_it + slots_a, mask=ok_a, other=0).to(tl.int64)
            s_a = block_scores(q_tok, kv_ptr, rows_a, ok_a, heads, head_ok, stride_qh, stride_kv, sm_scale,
                          D_V, D_TAIL, DC, BLOCK_H, SUB, UPCAST, TILE)
            block_max = tl.max(s_a, axis=1)
            if BLOCK > SUB:
                rows_b = tl.load(idx_ptr + token * stride_it + slots_b, mask=ok_b, other=0).to(tl.int64)
                s_b = block_scores(q_tok, kv_ptr, rows_b, ok_b, heads, head_ok, stride_qh, stride_kv, sm_scale,
                              D_V, D_TAIL, DC, BLOCK_H, SUB, UPCAST, TILE)
                block_max = tl.maximum(block_max, tl.max(s_b, axis=1))
            m_new = tl.maximum(m, block_max)
            base = tl.where(m_new == float("-inf"), 0.0, m_new)  # nothing valid yet: exp(-inf - 0) = 0
            alpha = tl.exp(m - base)
            p_a = tl.exp(s_a - base[:, None])
            p16_a = round_to_bf16(p_a, UPCAST)
            v_a = tl.load(kv_ptr + rows_a[:, None] * stride_kv + dims[None, :], mask=ok_a[:, None], other=0.0)
            if UPCAST:
                v_a = v_a.to(tl.float32)
            acc = tl.dot(p16_a, v_a, acc * alpha[:, None])
            total = tl.where(sum_rounded != 0, tl.sum(p16_a.to(tl.float32), axis=1), tl.sum(p_a, axis=1))
            if BLOCK > SUB:
                p_b = tl.exp(s_b - base[:, None])
                p16_b = round_to_bf16(p_b, UPCAST)
                v_b = tl.load(kv_ptr + rows_b[:, None] * stride_kv + dims[None, :], mask=ok_b[:, None],
                              other=0.0)
                if UPCAST:
                    v_b = v_b.to(tl.float32)
                acc = tl.dot(p16_b, v_b, acc)
                total += tl.where(sum_rounded != 0, tl.sum(p16_b.to(tl.float32), axis=1), tl.sum(p_b, axis=1))
            l = l * alpha + total
            m = m_new
    out = token * num_heads + heads
    tl.store(m_ptr + out, m, mask=head_ok)
    tl.store(l_ptr + out, l, mask=head_ok)
    tl.store(acc_ptr + out[:, None] * D_V + dims[None, :], acc, mask=head_ok[:, None])


def band_state(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, part: torch.Tensor, want: int,
               sm_scale: float, d_v: int, *, block: int, reverse: bool, sum_rounded: bool, score_tile: int = 0
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The online softmax of one variant over the slots where `part == want`: q [T, H, D] bf16, kv [S, D] bf16,
    indices [T, K] int32, part [T, K] int8 (module docstring), on one CUDA device (or the interpreter). Returns
    (m [T, H, 1], l [T, H, 1], acc [T, H, d_v]) fp32, as `band_kernels` keeps them."""
    num_tokens, num_heads, d_qk = q.shape
    d_tail = d_qk - d_v
    m = torch.empty((num_tokens, num_heads, 1), dtype=torch.float32, device=q.device)
    l = torch.empty_like(m)
    acc = torch.empty((num_tokens, num_heads, d_v), dtype=torch.float32, device=q.device)
    if num_tokens == 0:
        return m, l, acc
    sub = min(block, HALF_BLOCK)
    if block not in (16, 32, 64, 128):
        raise ValueError(f"block must be 16, 32, 64 or 128 slots, got {block}")
    if score_tile < 0 or score_tile % min(d_v, 64):
        raise ValueError(f"score_tile must be 0 or a positive multiple of {min(d_v, 64)}, got {score_tile}")
    grid = (num_tokens, triton.cdiv(num_heads, HEADS_PER_PROGRAM))
    _band_state_kernel[grid](
        q, kv, indices, part, m, l, acc, num_heads, indices.shape[1], float(sm_scale), int(want), int(reverse),
        int(sum_rounded), q.stride(0), q.stride(1), kv.stride(0), indices.stride(0), part.stride(0),
        D_V=d_v, D_TAIL=d_tail, DC=min(d_v, 64), BLOCK=block, SUB=sub, BLOCK_H=HEADS_PER_PROGRAM,
        UPCAST=interpreter_active(), TILE=score_tile, num_warps=4)
    return m, l, acc
