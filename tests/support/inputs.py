"""Kernel inputs and spies the kernel tests share."""

from __future__ import annotations

import torch

from glmcheck.data.indices import drifting_indices
from glmcheck.kernels import prefill

# Summation order and the running max at which P is rounded to bf16 differ, nothing else:
# measured 1.00e-3 on the H200 at 4096 tokens (each path is 1.95e-3 from fp64); an ignored
# ownership mask gives 0.59.
UNION_VS_PER_TOKEN_REL_L2 = 2e-3


def overlapping_indices(tokens: int, topk: int, seed: int, swap: float = 0.2,
                        dirt: float = 0.1, kv_rows: int | None = None) -> tuple[torch.Tensor, int]:
    """Neighbours share most rows but not all; some slots -1 or out of range. Returns (idx, S)."""
    base = drifting_indices([tokens], topk, swap, seed=seed)
    kv_rows = kv_rows or tokens
    g = torch.Generator().manual_seed(seed + 1)
    roll = torch.rand(base.shape, generator=g)
    junk = torch.where(torch.rand(base.shape, generator=g) < 0.5,
                       torch.full_like(base, -1),
                       torch.randint(kv_rows, kv_rows + 1000, base.shape, generator=g, dtype=torch.int32))
    junk[::3] = -5
    return torch.where(roll < dirt, junk, base), kv_rows


def set_indices(sets, tokens: int) -> torch.Tensor:
    """Each token's selection as the union sets hold it, [tokens, width] int32 padded with -1 (width: the longest
    set): token g * G + i selects rows[g, j] for j < lengths[g] with bit i of bits[g, j] set (the kernels' reading
    of UnionSets)."""
    width = max(1, int(sets.lengths.max())) if sets.lengths.numel() else 1
    out = torch.full((tokens, width), -1, dtype=torch.int32, device=sets.rows.device)
    valid = torch.arange(width, device=sets.rows.device)[None, :] < sets.lengths[:, None]
    for member in range(sets.group):
        owned = valid & (((sets.bits[:, :width].to(torch.int32) >> member) & 1) == 1)
        picked = torch.where(owned, sets.rows[:, :width].to(torch.int32), torch.full_like(out[:1], -1))
        out[member:sets.lengths.numel() * sets.group:sets.group] = picked
    return out


def spy_union_launches(monkeypatch, kinds: list[str] | None = None) -> list[int]:
    """Record G of every union attention launch (Triton tile or warp-specialised tile); `kinds`,
    when given, records which of the two ran ("triton" / "ws"). The per-token path's Gluon launches
    (one-token sets, G = 1: the tail tokens from 17 heads on) are not union launches."""
    calls: list[int] = []

    def spy_on(real, kind: str):
        def spy(args, sets, *rest):
            if sets.group > 1:
                calls.append(sets.group)
                if kinds is not None:
                    kinds.append(kind)
            return real(args, sets, *rest)
        return spy

    for name, kind in (("launch_union_attention", "triton"), ("launch_union_attention_ws", "ws")):
        monkeypatch.setattr(prefill, name, spy_on(getattr(prefill, name), kind))
    return calls
