"""Kernels in plain torch (no glmcheck import, so a repro script runs them standalone): `ideal`, an exact kernel but
for its bf16 output (fp32 gather-softmax), and faults on it with one structure each (tests/test_diagnosis.py)."""

from __future__ import annotations

import torch


def ideal(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    valid = (indices >= 0) & (indices < kv.shape[0])
    if topk_length is not None:
        valid &= torch.arange(indices.shape[1], device=indices.device) < topk_length[:, None].long()
    rows = torch.where(valid[..., None], kv[indices.long().clamp(0, kv.shape[0] - 1)].float(), 0.0)
    scores = torch.einsum("thd,tkd->thk", q.float(), rows).mul(sm_scale).masked_fill(~valid[:, None, :], -torch.inf)
    probs = torch.where(valid.any(dim=1)[:, None, None], torch.softmax(scores, dim=-1), 0.0)
    return torch.einsum("thk,tkd->thd", probs, rows[..., :d_v]).to(torch.bfloat16)


def heads_swapped(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    """Heads 0 and 1 written to each other's place."""
    out = ideal(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
    return out[:, [1, 0, *range(2, out.shape[1])]].contiguous()


def last_slot_dropped(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    """Every token's last valid slot ignored."""
    valid = (indices >= 0) & (indices < kv.shape[0])
    slots = torch.arange(indices.shape[1], device=indices.device)
    last = torch.where(valid, slots, -1).amax(dim=1)
    wrong = torch.where(valid, indices, -1)
    has = (last >= 0).nonzero().flatten()
    wrong[has, last[has]] = -1
    return ideal(q, kv, wrong, sm_scale, d_v)


def group_union(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    """Each token attends over every row its group of 4 tokens selects (a union path that ignores ownership)."""
    valid = (indices >= 0) & (indices < kv.shape[0])
    rows = []
    for t in range(indices.shape[0]):
        group = range(t // 4 * 4, min(t // 4 * 4 + 4, indices.shape[0]))
        rows.append(torch.unique(torch.cat([indices[g][valid[g]] for g in group])))
    width = max(r.numel() for r in rows)
    union = torch.stack([torch.nn.functional.pad(r, (0, width - r.numel()), value=-1) for r in rows])
    return ideal(q, kv, union.to(torch.int32), sm_scale, d_v)
