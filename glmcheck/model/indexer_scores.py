"""The DSA indexer's scores, computed from a transformers `GlmMoeDsaIndexer`'s own weights.

transformers' indexer returns only its top-k (under `no_grad`); training the indexer needs the
scores themselves, with gradients. This is the same math (DeepSeek-V3.2 / GLM-5.x lightning
indexer, interleaved RoPE on the first `qk_rope_head_dim` dims of each index head):

    q = wq_b(q_resid) -> [B, T, Hi, D];  k = k_norm(wk(x)) -> [B, S, D]
    score[b, t, s] = sum_h w[b, t, h] * relu(q[b, t, h] . k[b, s] * D^-0.5),  w = weights_proj(x) * Hi^-0.5

Unmasked: callers add causality (or a selection) themselves. fp32 scores; gradients flow into the
indexer's weights (and into the inputs unless they are detached). `tests/test_training.py` checks
that the top-k of these scores is the module's own top-k.
"""

from __future__ import annotations

import torch
from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import apply_rotary_pos_emb_interleave


def index_scores(indexer: torch.nn.Module, hidden_states: torch.Tensor, q_resid: torch.Tensor,
                 position_embeddings: tuple[torch.Tensor, torch.Tensor],
                 queries: slice | None = None) -> torch.Tensor:
    """fp32 [B, Tq, S] scores of the query rows `queries` (a slice, step allowed; default all) against
    every key position.

    hidden_states [B, S, hidden], q_resid [B, S, q_lora_rank], position_embeddings (cos, sin) [B, S, rope].
    """
    batch, seq, _ = hidden_states.shape
    queries = queries or slice(0, seq)
    heads, dim, rope = indexer.n_heads, indexer.head_dim, indexer.qk_rope_head_dim
    cos, sin = position_embeddings
    q = indexer.wq_b(q_resid[:, queries]).view(batch, -1, heads, dim)
    k = indexer.k_norm(indexer.wk(hidden_states)).unsqueeze(2)  # [B, S, 1, D]
    q_rot, _ = apply_rotary_pos_emb_interleave(q[..., :rope], q[..., :rope], cos[:, queries], sin[:, queries],
                                               unsqueeze_dim=2)
    k_rot, _ = apply_rotary_pos_emb_interleave(k[..., :rope], k[..., :rope], cos, sin, unsqueeze_dim=2)
    q = torch.cat([q_rot, q[..., rope:]], dim=-1)
    k = torch.cat([k_rot, k[..., rope:]], dim=-1).squeeze(2)  # [B, S, D]
    scores = torch.relu(torch.matmul(q.float(), k.float().transpose(-1, -2).unsqueeze(1)) * indexer.softmax_scale)
    weights = indexer.weights_proj(hidden_states[:, queries].to(indexer.weights_proj.weight.dtype)).float()
    weights = weights * heads ** -0.5
    return torch.matmul(weights.unsqueeze(-2), scores).squeeze(-2)  # [B, Tq, S]
