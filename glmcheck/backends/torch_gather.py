"""Plain PyTorch sparse-MLA prefill in bf16: gather + bmm, what a user would write first."""

from __future__ import annotations

import torch

from glmcheck.kernels.validate import check_prefill_args, valid_slot_mask


def torch_bf16_sparse_prefill(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float,
                              d_v: int = 512, *, topk_length: torch.Tensor | None = None,
                              chunk_tokens: int = 512) -> torch.Tensor:
    """Gather the selected rows per token chunk, bf16 bmm for scores and values, fp32 softmax.

    Returns [T, H, d_v] bf16. Tokens are processed `chunk_tokens` at a time so the gathered
    rows ([chunk, topk, d_qk] bf16) stay around a gigabyte at GLM sizes.
    """
    args = check_prefill_args(q, kv, indices, sm_scale, d_v, topk_length)
    out = torch.zeros((args.num_tokens, args.num_heads, d_v), dtype=torch.bfloat16, device=args.q.device)
    valid = valid_slot_mask(args.indices, args.num_kv_rows, args.topk_length)
    for start in range(0, args.num_tokens, chunk_tokens):
        part = slice(start, start + chunk_tokens)
        rows = args.kv[torch.where(valid[part], args.indices[part], 0).long()]  # [C, K, D]
        scores = torch.bmm(args.q[part], rows.transpose(1, 2)).float() * sm_scale
        scores.masked_fill_(~valid[part][:, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1).nan_to_num_(0.0).to(torch.bfloat16)
        out[part] = torch.bmm(probs, rows[..., :d_v])
    return out
