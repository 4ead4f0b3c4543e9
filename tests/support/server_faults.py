"""A plug-in backend for server tests that fails on purpose once it has run N kernel calls in its process:
`GLMCHECK_TEST_FAULT=die@N` kills the process (SIGKILL: a server that dies mid-run), `nan@N` returns NaN
(the server answers HTTP 500). Unset, it is the held-out band variant band:5 (a correct kernel)."""

from __future__ import annotations

import os
import signal

import torch

from glmcheck.backends.band_kernels import band_variant

_correct = band_variant(5)
_calls = 0


def faulty(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    global _calls
    _calls += 1
    mode, _, at = os.environ.get("GLMCHECK_TEST_FAULT", "").partition("@")
    if mode and _calls >= int(at):
        if mode == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "nan":
            return torch.full((q.shape[0], q.shape[1], d_v), float("nan"), dtype=torch.bfloat16, device=q.device)
    return _correct(q, kv, indices, sm_scale, d_v, topk_length=topk_length)


def rope_dropped(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    """The dropped rope tail (`glmcheck.selftest.faults.rope_tail_dropped`) on band:5, a torch kernel, so a task
    run of hundreds of forwards stays fast on the CPU (the Triton kernel runs in the interpreter there)."""
    q = q.clone()
    q[..., d_v:] = 0
    return _correct(q, kv, indices, sm_scale, d_v, topk_length=topk_length)


def shifted_rows(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    """Every token reads the row before each one it selected (an index off by one), on band:5."""
    shifted = torch.where(indices > 0, indices - 1, indices)
    return _correct(q, kv, shifted, sm_scale, d_v, topk_length=topk_length)
