"""A planted fault that fires only past a position: correct (the held-out band variant band:5) for tokens before
it, then each token from it on reads its neighbour rows (index - 1), as an int32 overflow or a wrong stride past
some length would. The sweep tests find its onset; serve tests plug it into `glmcheck serve --backend
late=tests/support/late_fault.py:late_fault`."""

from __future__ import annotations

import torch

from glmcheck.backends.band_kernels import band_variant

LATE_FROM = 100  # `late_fault`: tokens at or past this position are wrong
LATE_FROM_5000 = 5000  # `late_fault_5000`, the GPU sweep's fault: inside the bin of lengths 4097..8192

_correct = band_variant(5)


def _wrong_from(start: int):
    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        out = _correct(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
        if q.shape[0] > start:
            late = indices[start:]
            shifted = torch.where(late > 0, late - 1, late)
            length = None if topk_length is None else topk_length[start:]
            out[start:] = _correct(q[start:], kv, shifted, sm_scale, d_v, topk_length=length)
        return out
    return kernel


late_fault = _wrong_from(LATE_FROM)
late_fault_5000 = _wrong_from(LATE_FROM_5000)  # run 35 of the length sweep on ref-gpu, 1024..32768 tokens
