"""Inputs for the noise band's kernels (tests/test_band_kernels.py, tests/test_band_triton.py)."""

from __future__ import annotations

import torch

from glmcheck.data.inputs import random_distinct_indices, random_qkv


def awkward(device, topk_length: bool):
    """T = 37 tokens, top-k 75 (no block size divides either), ragged -1 slots, out-of-range rows
    (>= S and < -1), token 5 without any valid slot; with `topk_length` also a ragged length and a
    token of length 0."""
    g = torch.Generator().manual_seed(11)
    tokens, heads, d_v, d_tail, rows, topk = 37, 4, 32, 16, 200, 75
    q, kv = random_qkv(tokens, heads, rows, d_v, d_tail, g, "cpu")
    q = (q.float() * 3).bfloat16()  # scores of spread ~3: peaked softmaxes, the running max moves
    indices = random_distinct_indices(tokens, topk, rows, g, empty_fraction=0.2)
    indices[3, 7], indices[4, 60], indices[6, 0] = rows, rows + 50, -7
    indices[5] = -1
    length = None
    if topk_length:
        length = torch.randint(0, topk + 1, (tokens,), generator=g, dtype=torch.int32)
        length[9], length[10] = 0, topk
    device = torch.device(device)
    return (q.to(device), kv.to(device), indices.to(device), d_v,
            None if length is None else length.to(device))


def realistic(device):
    """64 tokens x 8 heads, top-k 512 of 2048 rows, scores of spread ~3, ragged lengths."""
    g = torch.Generator().manual_seed(5)
    q, kv = random_qkv(64, 8, 2048, 64, 16, g, "cpu")
    indices = random_distinct_indices(64, 512, 2048, g)
    length = torch.randint(256, 513, (64,), generator=g, dtype=torch.int32)
    device = torch.device(device)
    return (q.float() * 3).bfloat16().to(device), kv.to(device), indices.to(device), length.to(device)
