"""FlashMLA wrapper padding (CPU, with a stand-in for the library): heads to 64, topk to 128."""

from __future__ import annotations

import torch

from glmcheck.backends import flashmla


def test_heads_and_topk_are_padded_for_flashmla(monkeypatch):
    seen = {}

    def run(q, kv, indices, sm_scale, d_v, topk_length):
        seen["q"], seen["indices"] = q.shape, indices.clone()
        return torch.zeros(q.shape[0], q.shape[1], d_v, dtype=q.dtype)

    monkeypatch.setattr(flashmla, "find_flashmla", lambda library=None: flashmla.FlashMLA("stand-in", run))
    q = torch.zeros(5, 8, 576, dtype=torch.bfloat16)
    kv = torch.zeros(40, 576, dtype=torch.bfloat16)
    indices = torch.arange(5 * 30, dtype=torch.int32).view(5, 30) % 40  # a 30-token prompt: topk 30
    out = flashmla.flashmla_sparse_prefill(q, kv, indices, 0.1)
    assert out.shape == (5, 8, 512)
    assert seen["q"] == (5, 64, 576), "heads zero-padded to 64"
    assert seen["indices"].shape == (5, 1, 128), "FlashMLA asserts topk % 128 == 0"
    assert torch.equal(seen["indices"][:, 0, :30], indices) and (seen["indices"][:, 0, 30:] == -1).all()
