"""The DSA indexer's scores, computed from a transformers `GlmMoeDsaIndexer`'s own weights.

transformers' indexer returns only its top-k (under `no_grad`); training the indexer needs the
scores themselves, with gradients, and long prompts need them a chunk of query rows at a time
(`glmcheck.model.indexer_chunks`). This is the same math, in the same operations and order
(DeepSeek-V3.2 / GLM-5.x lightning indexer, interleaved RoPE on the first `qk_rope_head_dim` dims
of each index head):

    q = wq_b(q_resid) -> [B, T, Hi, D];  k = k_norm(wk(x)) -> [B, S, D]
    score[b, t, s] = sum_h w[b, t, h] * relu(q[b, t, h] . k[b, s] * D^-0.5),  w = weights_proj(x) * Hi^-0.5

Unmasked: callers add causality (or a selection) themselves. fp32 scores; gradients flow into the
indexer's weights (and into the inputs unless they are detached). `tests/test_training.py` checks
that the top-k of these scores is the module's own top-k; `tests/test_long_context.py` that the
pieces below, used on all rows, reproduce it bit for bit.
"""

from __future__ import annotations

import torch
from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import apply_rotary_pos_emb_interleave


def index_queries(indexer: torch.nn.Module, q_resid: torch.Tensor,
                  position_embeddings: tuple[torch.Tensor, torch.Tensor], rows: slice | None = None) -> torch.Tensor:
    """Roped index queries [B, Tq, Hi, D] (the module's dtype) of the rows `rows` (default all).

    q_resid [B, T, q_lora_rank]; position_embeddings (cos, sin) [B, T, rope]. `wq_b` runs on the
    selected rows only: a GEMM's rows may round differently with another row count, so callers that
    must match transformers bit for bit pass all rows and slice the result.
    """
    rows = rows or slice(None)
    cos, sin = position_embeddings
    batch = q_resid.shape[0]
    rope = indexer.qk_rope_head_dim
    q = indexer.wq_b(q_resid[:, rows]).view(batch, -1, indexer.n_heads, indexer.head_dim)
    q_rot, _ = apply_rotary_pos_emb_interleave(q[..., :rope], q[..., :rope], cos[:, rows], sin[:, rows],
                                               unsqueeze_dim=2)
    return torch.cat([q_rot, q[..., rope:]], dim=-1)


def index_keys(indexer: torch.nn.Module, hidden_states: torch.Tensor,
               position_embeddings: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Roped index keys [B, S, D] (the module's dtype) of every position of hidden_states [B, S, hidden]."""
    cos, sin = position_embeddings
    rope = indexer.qk_rope_head_dim
    k = indexer.k_norm(indexer.wk(hidden_states)).unsqueeze(2)  # [B, S, 1, D]
    k_rot, _ = apply_rotary_pos_emb_interleave(k[..., :rope], k[..., :rope], cos, sin, unsqueeze_dim=2)
    return torch.cat([k_rot, k[..., rope:]], dim=-1).squeeze(2)


def index_weights(indexer: torch.nn.Module, hidden_states: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
    """Per-head weights fp32 [B, Tq, Hi] of the rows `rows` (default all), already scaled by Hi^-0.5."""
    rows = rows or slice(None)
    weights = indexer.weights_proj(hidden_states[:, rows].to(indexer.weights_proj.weight.dtype)).float()
    return weights * indexer.n_heads ** -0.5


def weighted_scores(q: torch.Tensor, keys_t: torch.Tensor, weights: torch.Tensor, softmax_scale: float) -> torch.Tensor:
    """fp32 [B, Tq, S] scores of queries q [B, Tq, Hi, D] against keys_t fp32 [B, 1, D, S] (`transposed_keys`)
    with weights fp32 [B, Tq, Hi]. Transient: an fp32 [B, Tq, Hi, S] tensor (freed on return).

    transformers broadcasts keys_t over the query rows (Tq batched [Hi, D] x [D, S] GEMMs, which re-read the keys
    once a row); here the Tq * Hi query vectors are the rows of one [Tq * Hi, D] x [D, S] GEMM per batch. Each
    score is the same length-D dot product: the bits are transformers' (tests/test_long_context.py; on the H200,
    docs/performance.md "The indexer's scores as one GEMM": 5.4x faster at 32768 keys).
    """
    batch, rows, heads, dim = q.shape
    scores = torch.matmul(q.float().reshape(batch, rows * heads, dim), keys_t.squeeze(1))
    scores = scores.view(batch, rows, heads, -1).mul_(softmax_scale).relu_()  # [B, Tq, Hi, S]
    return torch.matmul(weights.unsqueeze(-2), scores).squeeze(-2)


def transposed_keys(keys: torch.Tensor) -> torch.Tensor:
    """keys [B, S, D] -> fp32 [B, 1, D, S] (a transposed layout, as transformers' indexer feeds its matmul)."""
    return keys.transpose(-1, -2).float().unsqueeze(1)


def index_scores(indexer: torch.nn.Module, hidden_states: torch.Tensor, q_resid: torch.Tensor,
                 position_embeddings: tuple[torch.Tensor, torch.Tensor],
                 queries: slice | None = None) -> torch.Tensor:
    """fp32 [B, Tq, S] scores of the query rows `queries` (a slice, step allowed; default all) against
    every key position (projections of the selected query rows only: cheap for strided training rows).

    hidden_states [B, S, hidden], q_resid [B, S, q_lora_rank], position_embeddings (cos, sin) [B, S, rope].
    """
    q = index_queries(indexer, q_resid, position_embeddings, queries)
    keys_t = transposed_keys(index_keys(indexer, hidden_states, position_embeddings))
    return weighted_scores(q, keys_t, index_weights(indexer, hidden_states, queries), indexer.softmax_scale)
