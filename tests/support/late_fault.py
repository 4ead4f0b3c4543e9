"""A planted fault that fires only past a length: correct (the held-out band variant band:5) for tokens
before LATE_FROM, then each token from LATE_FROM on reads its neighbour rows (index - 1), as an int32
overflow or a wrong stride past some length would. The sweep tests find its onset; serve tests plug it
into `glmcheck serve --backend late=tests/support/late_fault.py:late_fault`."""

from __future__ import annotations

import torch

from glmcheck.backends.band_kernels import band_variant

LATE_FROM = 100  # tokens at or past this position are wrong

_correct = band_variant(5)


def late_fault(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    out = _correct(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
    if q.shape[0] > LATE_FROM:
        late = indices[LATE_FROM:]
        shifted = torch.where(late > 0, late - 1, late)
        length = None if topk_length is None else topk_length[LATE_FROM:]
        out[LATE_FROM:] = _correct(q[LATE_FROM:], kv, shifted, sm_scale, d_v, topk_length=length)
    return out


LATE_FROM_5000 = 5000  # the GPU sweep's fault: inside the bin of lengths 4097..8192


def late_fault_5000(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    """As `late_fault`, from position 5000 on (run 35 of the length sweep on ref-gpu, 1024..32768 tokens)."""
    out = _correct(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
    if q.shape[0] > LATE_FROM_5000:
        late = indices[LATE_FROM_5000:]
        shifted = torch.where(late > 0, late - 1, late)
        length = None if topk_length is None else topk_length[LATE_FROM_5000:]
        out[LATE_FROM_5000:] = _correct(q[LATE_FROM_5000:], kv, shifted, sm_scale, d_v, topk_length=length)
    return out
