"""Plug-in kernels that break the kernel contract while they run, each on the held-out band variant band:5 (a
correct kernel) so a check's other rows stay meaningful: one raises, one returns the wrong shape, one fp32 instead
of bf16. Every check must turn each into a FAIL row naming it (issue 54)."""

from __future__ import annotations

from glmcheck.backends.band_kernels import band_variant

_correct = band_variant(5)


def raises(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    raise RuntimeError("CUDA error: an illegal memory access was encountered (planted)")


def wrong_shape(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    return _correct(q, kv, indices, sm_scale, d_v, topk_length=topk_length)[:, :, : d_v // 2]


def fp32_out(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    return _correct(q, kv, indices, sm_scale, d_v, topk_length=topk_length).float()


def correct(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    return _correct(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
