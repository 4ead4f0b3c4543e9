"""Absorbed-MLA math for GLM-5.x DSA attention (see DESIGN: "The math (absorbed MLA)").

Shapes use B batch, S tokens, H heads, N = nope dim (192), R = rope dim (64), V = v dim (256),
L = kv latent rank (512). Pure tensor functions; no model state.
"""

from __future__ import annotations

import torch


def split_kv_b(kv_b_weight: torch.Tensor, num_heads: int, nope: int, v_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """kv_b_proj.weight [H*(N+V), L] -> (W_UK [H, N, L], W_UV [H, V, L]) as views."""
    per_head = kv_b_weight.view(num_heads, nope + v_dim, kv_b_weight.shape[-1])
    return per_head[:, :nope], per_head[:, nope:]


def absorb_query(q_nope: torch.Tensor, w_uk: torch.Tensor) -> torch.Tensor:
    """q_nope [B, H, S, N] and W_UK [H, N, L] -> q_nope @ W_UK per head, [B, S, H, L] in fp32."""
    return torch.einsum("bhsn,hnl->bshl", q_nope.float(), w_uk.float())


def kv_rows(latent: torch.Tensor, k_rot: torch.Tensor) -> torch.Tensor:
    """latent [B, S, L] and k_rot [B, S, R] -> kernel KV rows [B*S, L+R] (latent ++ rope)."""
    rows = torch.cat([latent, k_rot.to(latent.dtype)], dim=-1)
    return rows.reshape(-1, rows.shape[-1]).contiguous()


def expand_values(out_latent: torch.Tensor, w_uv: torch.Tensor) -> torch.Tensor:
    """out_latent [T, H, L] and W_UV [H, V, L] -> per-head value output [T, H, V] in fp32."""
    return torch.einsum("thl,hvl->thv", out_latent.float(), w_uv.float())


def kernel_indices(topk: torch.Tensor) -> torch.Tensor:
    """Indexer top-k [B, S, K] -> kernel convention [B*S, K] int32 over a [B*S] KV pool.

    Prefill without cache: token s of a sequence may attend rows 0..s. Transformers' indexer
    returns torch.topk indices that include masked future positions for s < K; every index
    > s (and any negative one) becomes -1. Valid indices of sequence b are offset by b*S.
    """
    batch, seq, _ = topk.shape
    position = torch.arange(seq, device=topk.device).view(1, seq, 1)
    offset = (torch.arange(batch, device=topk.device) * seq).view(batch, 1, 1)
    valid = (topk >= 0) & (topk <= position)
    mapped = torch.where(valid, topk.long() + offset, torch.full_like(topk, -1, dtype=torch.long))
    return mapped.reshape(batch * seq, -1).to(torch.int32)
