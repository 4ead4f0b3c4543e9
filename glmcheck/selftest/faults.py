"""Planted faults at realistic sizes, as backends wrapping the kernel under test.

Each takes the kernel signature and returns what a subtly broken kernel would: the verdict's
detection rate is measured on them (`glmcheck.selftest.rates`). Sizes are those a real bug
gives: a scale off by 0.3 %, a softmax scale off by 0.1 %, one token in 64 or in 100.
"""

from __future__ import annotations

from typing import Callable

import torch

from glmcheck.kernels import sparse_mla_prefill
from glmcheck.kernels.validate import valid_slot_mask

KernelFn = Callable[..., torch.Tensor]


def output_scaled(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """The output multiplied by 1.003 (a wrong normaliser, a stray constant)."""
    out = sparse_mla_prefill(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
    return (out.float() * 1.003).to(out.dtype)


def softmax_scale_off(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """The softmax scale multiplied by 1.001 (log2(e) folded in with too few digits)."""
    return sparse_mla_prefill(q, kv, indices, sm_scale * 1.001, d_v, topk_length=topk_length)


def rope_tail_dropped(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """Scores without the rope part of the dot product (q[..., d_v:] ignored)."""
    q = q.clone()
    q[..., d_v:] = 0
    return sparse_mla_prefill(q, kv, indices, sm_scale, d_v, topk_length=topk_length)


def neighbour_rows(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """One token in 64 (tokens 0, 64, ...) attends over the next token's selection."""
    wrong = indices.clone()
    tokens = torch.arange(0, indices.shape[0] - 1, 64, device=indices.device)
    wrong[tokens] = indices[tokens + 1]
    lengths = None
    if topk_length is not None:
        lengths = topk_length.clone()
        lengths[tokens] = topk_length[tokens + 1]
    return sparse_mla_prefill(q, kv, wrong, sm_scale, d_v, topk_length=lengths)


def empty_slot_as_row0(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """In one token of 100 (tokens 1, 101, ... that have an empty slot) the first empty slot reads
    KV row 0 instead of nothing."""
    valid = valid_slot_mask(indices, kv.shape[0], topk_length)
    wrong = torch.where(valid, indices, -1)
    for token in range(1, indices.shape[0], 100):
        empty = (~valid[token]).nonzero()
        if len(empty):
            wrong[token, empty[0, 0]] = 0
    return sparse_mla_prefill(q, kv, wrong, sm_scale, d_v)


FAULTS: dict[str, tuple[KernelFn, str]] = {
    "fault:output_x1.003": (output_scaled, "output x 1.003"),
    "fault:sm_scale_x1.001": (softmax_scale_off, "softmax scale x 1.001"),
    "fault:rope_dropped": (rope_tail_dropped, "the rope tail of the scores dropped"),
    "fault:neighbour_1in64": (neighbour_rows, "one token in 64 reads its neighbour's rows"),
    "fault:empty_row0_1in100": (empty_slot_as_row0, "an empty slot read as row 0 in one token of 100"),
}
