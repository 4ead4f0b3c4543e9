"""Torch references for the sparse-MLA prefill kernel (fp64 by default, fp32 option).

Same arguments as `glmcheck.kernels.sparse_mla_prefill`: per token, a softmax over its own
valid selected rows only (valid: slot below topk_length[t], row in [0, S)); rows with no valid
slot give zeros. Tokens are processed in chunks so memory stays bounded at T = 8192,
topk = 2048 (about `budget_bytes` for the gathered rows of one chunk).
"""

from __future__ import annotations

import torch

from glmcheck.kernels.validate import check_prefill_args, valid_slot_mask


def sparse_mla_reference(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float,
                         d_v: int = 512, *, topk_length: torch.Tensor | None = None,
                         dtype: torch.dtype = torch.float64, round_probs: bool = False,
                         budget_bytes: int = 256 * 2**20) -> torch.Tensor:
    """Reference sparse-MLA prefill; returns [T, H, d_v] in `dtype` on q's device. `round_probs`
    rounds the unnormalised probabilities to bf16 before P.V (the normaliser stays unrounded), as
    flash kernels feed P to a bf16 MMA."""
    if dtype not in (torch.float64, torch.float32):
        raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
    args = check_prefill_args(q, kv, indices, sm_scale, d_v, topk_length)
    num_tokens, num_heads, d_qk = args.q.shape
    out = torch.zeros((num_tokens, num_heads, d_v), dtype=dtype, device=args.q.device)
    if num_tokens == 0 or args.topk == 0:
        return out
    valid = valid_slot_mask(args.indices, args.num_kv_rows, args.topk_length)
    row_bytes = args.topk * d_qk * torch.finfo(dtype).bits // 8
    chunk = max(1, budget_bytes // row_bytes)
    for start in range(0, num_tokens, chunk):
        stop = min(start + chunk, num_tokens)
        out[start:stop] = _reference_chunk(args.q[start:stop].to(dtype), args.kv,
                                           args.indices[start:stop], valid[start:stop],
                                           args.sm_scale, d_v, round_probs)
    return out


def _reference_chunk(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor,
                     valid: torch.Tensor, sm_scale: float, d_v: int, round_probs: bool = False) -> torch.Tensor:
    """One chunk: q [C, H, D] (dtype), kv [S, D] bf16, indices/valid [C, K] -> [C, H, d_v]."""
    rows = kv[torch.where(valid, indices, 0).long()].to(q.dtype)  # [C, K, D]
    scores = torch.einsum("chd,ckd->chk", q, rows) * sm_scale
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    if not round_probs:
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # all-masked rows -> 0
        return torch.einsum("chk,ckd->chd", probs, rows[..., :d_v])
    top = scores.amax(dim=-1, keepdim=True).nan_to_num(0.0, neginf=0.0)
    weights = torch.exp(scores - top)  # masked slots -> 0
    total = weights.sum(dim=-1, keepdim=True)
    out = torch.einsum("chk,ckd->chd", weights.to(torch.bfloat16).to(q.dtype), rows[..., :d_v])
    return torch.where(total > 0, out / total.clamp_min(torch.finfo(q.dtype).tiny), 0.0)


def band_variant(k: int):
    """Legitimate variant k of the checks' noise band: an ideal bf16-output kernel. The fp32
    reference with its slots summed in a seeded order (k = 0: as given) and, for odd k, the
    probabilities rounded to bf16 before P.V; output rounded to bf16. Same signature as the
    kernel; selects the same rows, so any difference from the reference is rounding alone."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"band variant must be an int >= 0, got {k!r}")

    def variant(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
        args = check_prefill_args(q, kv, indices, sm_scale, d_v, topk_length)
        slots = torch.where(valid_slot_mask(args.indices, args.num_kv_rows, args.topk_length), args.indices, -1)
        if k >= 2 and slots.shape[1] > 1:
            order = torch.randperm(slots.shape[1], generator=torch.Generator().manual_seed(k))
            slots = slots[:, order.to(slots.device)]
        return sparse_mla_reference(args.q, args.kv, slots.contiguous(), args.sm_scale, d_v, dtype=torch.float32,
                                    round_probs=bool(k % 2)).to(torch.bfloat16)

    return variant
