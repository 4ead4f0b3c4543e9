"""The gather probe computes what it claims before anyone times it (CPU interpreter)."""

from __future__ import annotations

import torch

from glmcheck.bench.ceilings import gather_sum, gather_sum_reference
from glmcheck.data.inputs import random_distinct_indices


def test_gather_probe_sums_the_selected_rows(device):
    g = torch.Generator().manual_seed(0)
    kv = torch.randn(100, 64, generator=g).to(torch.bfloat16).to(device)
    indices = random_distinct_indices(9, 40, 100, g, empty_fraction=0.3).to(device)
    indices[2, 5] = 500  # out of range: empty
    lengths = torch.randint(0, 41, (9,), generator=g, dtype=torch.int32).to(device)
    got = gather_sum(kv, indices, lengths)
    assert torch.allclose(got, gather_sum_reference(kv, indices, lengths), rtol=1e-5, atol=1e-4)
