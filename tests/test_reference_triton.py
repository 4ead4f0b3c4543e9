"""The fp32 exact reference's Triton form (glmcheck.backends.reference_triton: bf16 MMAs with exact products, p split
into three bf16 parts; GLMCHECK_REFERENCE_IMPL=triton, on the CPU through the interpreter): within fp32 rounding of
the fp64 reference, the torch form's contract at its edges, the choice."""

from __future__ import annotations

import pytest
import torch

from glmcheck.backends import reference
from glmcheck.backends.forms import REFERENCE_ENV
from glmcheck.backends.reference import reference_impl, sparse_mla_reference
from glmcheck.data.inputs import random_distinct_indices, random_qkv
from tests.support.band_inputs import awkward


def _forms(monkeypatch, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp32 reference of args in its torch form, then in its Triton form."""
    out = []
    for form in ("torch", "triton"):
        monkeypatch.setenv(REFERENCE_ENV, form)
        out.append(sparse_mla_reference(*args, dtype=torch.float32, **kwargs))
    return out[0], out[1]


@pytest.mark.parametrize("topk_length", [False, True])
def test_within_fp32_rounding_of_the_fp64_reference(device, monkeypatch, topk_length):
    """Both forms within 4e-6 of the largest |output| of the fp64 reference (measured 5e-7 on the CPU; a wrong slot,
    length or scale moves outputs by 1e-2 and more, p as one bf16 part instead of three by ~2e-3), zeros for tokens
    without a valid slot."""
    q, kv, indices, d_v, length = awkward(device, topk_length)
    exact = sparse_mla_reference(q, kv, indices, 0.3, d_v, topk_length=length)
    scale = float(exact.abs().max())
    for form, out in zip(("torch", "triton"), _forms(monkeypatch, q, kv, indices, 0.3, d_v, topk_length=length)):
        assert out.dtype == torch.float32 and out.shape == exact.shape and out.device == q.device
        assert float((out.double() - exact).abs().max()) <= 4e-6 * scale, form
        assert bool((out[5] == 0).all()), form
        if length is not None:
            assert bool((out[9] == 0).all()), form


def test_nan_and_inf(device, monkeypatch):
    """A NaN in unselected row 0 stays out; a NaN in a selected row and an Inf in q reach the same outputs as in the
    torch form."""
    q, kv, indices, d_v, length = awkward(device, True)
    kv, q = kv.clone(), q.clone()
    indices = torch.where(indices == 0, -1, indices)
    kv[0, 3] = float("nan")
    clean_torch, clean = _forms(monkeypatch, q, kv, indices, 0.3, d_v, topk_length=length)
    assert bool(torch.isfinite(clean).all()) and bool(torch.isfinite(clean_torch).all())
    kv[int(indices[2, 0]), d_v + 2] = float("nan")
    q[7, 1, 0] = float("inf")
    torch_form, triton_form = _forms(monkeypatch, q, kv, indices, 0.3, d_v, topk_length=length)
    assert not bool(torch.isfinite(triton_form[2]).any()) and not bool(torch.isfinite(triton_form[7, 1]).all())
    assert torch.equal(torch.isfinite(torch_form), torch.isfinite(triton_form))


@pytest.mark.parametrize("heads", [1, 20])
def test_heads_outside_one_program(device, monkeypatch, heads):
    g = torch.Generator().manual_seed(9)
    q, kv = random_qkv(12, heads, 300, 64, 64, g, "cpu")
    indices = random_distinct_indices(12, 96, 300, g, empty_fraction=0.1)
    q, kv, indices = (q.float() * 3).bfloat16().to(device), kv.to(device), indices.to(device)
    exact = sparse_mla_reference(q, kv, indices, 0.125, 64)
    torch_form, triton_form = _forms(monkeypatch, q, kv, indices, 0.125, 64)
    assert triton_form.shape == (12, heads, 64)
    for out in (torch_form, triton_form):
        assert float((out.double() - exact).abs().max()) <= 4e-6 * float(exact.abs().max())


def test_which_form_runs(monkeypatch):
    monkeypatch.delenv(REFERENCE_ENV, raising=False)
    assert reference_impl() == "torch", "the torch form until the Triton one is timed on the GPU"
    monkeypatch.setenv(REFERENCE_ENV, " Triton ")
    assert reference_impl() == "triton"
    monkeypatch.setenv(REFERENCE_ENV, "gpu")
    q, kv, indices, d_v, _ = awkward("cpu", False)
    with pytest.raises(ValueError, match=r"GLMCHECK_REFERENCE_IMPL must be torch or triton, got 'gpu'"):
        sparse_mla_reference(q, kv, indices, 0.3, d_v, dtype=torch.float32)
    sparse_mla_reference(q, kv, indices, 0.3, d_v)  # fp64: always the torch form, the variable unread


def test_the_triton_form_is_what_runs(device, monkeypatch):
    monkeypatch.setenv(REFERENCE_ENV, "triton")
    monkeypatch.setattr(reference, "_reference_chunk", None)
    q, kv, indices, d_v, _ = awkward(device, False)
    assert sparse_mla_reference(q, kv, indices, 0.3, d_v, dtype=torch.float32).shape == (37, 4, d_v)
