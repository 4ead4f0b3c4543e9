"""A kernel under test from outside glmcheck, as a package would ship one (tests/test_plugins.py
installs it into a temporary site directory with an entry point, or names it by module)."""

from __future__ import annotations

import torch

from glmcheck.backends.reference import sparse_mla_reference


def sparse_prefill(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    """The backend signature: the fp32 reference, output rounded to bf16 (an exact kernel)."""
    return sparse_mla_reference(q, kv, indices, sm_scale, d_v, topk_length=topk_length,
                                dtype=torch.float32).to(torch.bfloat16)


NOT_A_FUNCTION = 3
