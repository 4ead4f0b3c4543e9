"""Longest-first schedule (branch experiment): same outputs as token order, bitwise."""

from __future__ import annotations

import pytest
import torch

from glmcheck.inputs import random_qkv
from glmcheck.kernels import sparse_mla_prefill
from glmcheck.kernels.runtime import schedule
from tests.test_union import overlapping_indices


@pytest.mark.parametrize("union", [0, 2, 4])
def test_longest_first_equals_token_order(device, monkeypatch, union):
    indices, kv_rows = overlapping_indices(tokens=19, topk=32, seed=7)
    q, kv = random_qkv(19, 8, kv_rows, 64, 16, torch.Generator().manual_seed(7), device)
    indices = indices.to(device)
    results = []
    for longest_first in (False, True):
        monkeypatch.setitem(schedule, "longest_first", longest_first)
        out = torch.full((19, 8, 64), float("nan"), dtype=torch.bfloat16, device=device)
        results.append(sparse_mla_prefill(q, kv, indices, 80 ** -0.5, 64, out=out, union=union))
    assert not results[1].isnan().any(), "a token was never written"
    assert torch.equal(results[0], results[1])
