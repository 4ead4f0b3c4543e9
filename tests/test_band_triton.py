"""The band's Triton form (glmcheck.backends.band_triton; the GPU's default, the CPU's through the interpreter): the
variant it is told to be, within that variant's bound of the exact reference (tests/test_band_kernels.py runs the
bound for both forms), the torch form's contract at its edges, and the choice of form."""

from __future__ import annotations

import pytest
import torch

from glmcheck.backends import band_kernels
from glmcheck.backends.band_kernels import BAND_FAMILY, band_impl, flash_sparse_mla
from glmcheck.backends.forms import BAND_ENV
from glmcheck.backends.reference import band_variant, sparse_mla_reference
from glmcheck.checks import metrics
from glmcheck.data.inputs import random_distinct_indices, random_qkv
from tests.support.band_inputs import awkward


@pytest.fixture
def triton_band(monkeypatch):
    monkeypatch.setenv(BAND_ENV, "triton")


@pytest.fixture
def torch_band(monkeypatch):
    monkeypatch.setenv(BAND_ENV, "torch")


def _both(monkeypatch, run):
    """run() under the torch form, then under the Triton form."""
    monkeypatch.setenv(BAND_ENV, "torch")
    first = run()
    monkeypatch.setenv(BAND_ENV, "triton")
    return first, run()


def _small(device, heads: int = 8):
    """16 tokens, top-k 256 of 512 rows, scores of spread ~3, ragged lengths: every block size has several blocks."""
    g = torch.Generator().manual_seed(7)
    q, kv = random_qkv(16, heads, 512, 64, 16, g, "cpu")
    indices = random_distinct_indices(16, 256, 512, g)
    length = torch.randint(128, 257, (16,), generator=g, dtype=torch.int32)
    return ((q.float() * 3).bfloat16().to(device), kv.to(device), indices.to(device), length.to(device))


def test_each_variant_is_itself_not_a_neighbour(device, monkeypatch):
    """The Triton form of variant k sits far closer to the torch form of k than the torch forms of the other
    variants sit to k (block size, order, normaliser, split: a wrong one would land at another variant's distance).
    Measured on the CPU: the same variant 1.4e-5 to 7.6e-5 apart, another 4.4e-4 to 9.7e-4."""
    q, kv, indices, length = _small(device)
    chosen = (0, 1, 2, 3, 6, 7)  # the default band, and block 128 (read as two halves of 64 slots)
    torch_forms, triton_forms = {}, {}
    for k in chosen:
        torch_forms[k], triton_forms[k] = _both(
            monkeypatch, lambda k=k: band_variant(k)(q, kv, indices, 0.125, 64, topk_length=length))
    for k in chosen:
        same = metrics.rel_l2(triton_forms[k], torch_forms[k])
        nearest = min(metrics.rel_l2(torch_forms[j], torch_forms[k]) for j in chosen if j != k)
        assert same < 0.25 * nearest, (k, BAND_FAMILY[k], same, nearest)


def test_nan_stays_out_of_unselected_rows_and_reaches_the_output_from_selected_ones(device, triton_band):
    q, kv, indices, d_v, length = awkward(device, True)
    kv = kv.clone()
    indices = torch.where(indices == 0, -1, indices)
    kv[0, 3] = float("nan")  # row 0: selected by no token; an empty slot must not read it
    out = band_variant(1)(q, kv, indices, 0.3, d_v, topk_length=length)
    assert bool(torch.isfinite(out).all())
    row = int(indices[2, 0])
    assert row >= 0 and int(length[2]) > 0
    kv[row, d_v + 2] = float("nan")  # a selected row's rope part: every head of token 2 sees it
    q2 = q.clone()
    q2[7, 1, 0] = float("inf")
    for k in (0, 1, 6):
        out = band_variant(k)(q2, kv, indices, 0.3, d_v, topk_length=length)
        assert bool(torch.isnan(out[2]).all()), (k, "a NaN in a selected row is never hidden")
        selects = ((indices == row) & (torch.arange(indices.shape[1], device=device) < length[:, None])).any(dim=1)
        assert bool(torch.isfinite(out[~selects & (torch.arange(37, device=device) != 7)]).all()), k
        assert not bool(torch.isfinite(out[7, 1]).all()), (k, "an Inf in q reaches its head")


@pytest.mark.parametrize("heads", [1, 20])
def test_heads_outside_one_program(device, monkeypatch, heads):
    """One head (15 masked rows of the 16 a program holds) and 20 heads (two programs, the second 4 heads)."""
    q, kv, indices, length = _small(device, heads)
    exact = sparse_mla_reference(q, kv, indices, 0.125, 64, topk_length=length)
    ref16, out16 = _both(monkeypatch, lambda: band_variant(3)(q, kv, indices, 0.125, 64, topk_length=length))
    assert out16.shape == (16, heads, 64)
    assert metrics.rel_l2(out16, exact) < 2 ** -8 and metrics.rel_l2(out16, ref16) < 2 ** -10


def test_token_chunks_do_not_change_a_bit(device, triton_band):
    q, kv, indices, d_v, length = awkward(device, True)
    spec = BAND_FAMILY[3]
    whole = flash_sparse_mla(q, kv, indices, 0.3, d_v, topk_length=length, variant=spec)
    tiny = flash_sparse_mla(q, kv, indices, 0.3, d_v, topk_length=length, variant=spec, budget_bytes=1)
    assert torch.equal(whole.view(torch.int16), tiny.view(torch.int16))
    assert bool((whole[5] == 0).all()) and bool((whole[9] == 0).all())


def test_which_form_runs(monkeypatch):
    monkeypatch.delenv(BAND_ENV, raising=False)
    assert band_impl(torch.device("cpu")) == "torch" and band_impl(torch.device("cuda", 0)) == "triton"
    monkeypatch.setenv(BAND_ENV, " Torch ")
    assert band_impl(torch.device("cuda", 0)) == "torch"
    monkeypatch.setenv(BAND_ENV, "triton")
    assert band_impl(torch.device("cpu")) == "triton"
    monkeypatch.setenv(BAND_ENV, "cuda")
    with pytest.raises(ValueError, match=r"GLMCHECK_BAND_IMPL must be auto, torch or triton, got 'cuda'"):
        flash_sparse_mla(*awkward("cpu", False)[:3], 0.3, 32)


def test_the_triton_form_is_what_runs(device, monkeypatch, triton_band):
    """The Triton form does not fall back to the torch block loop."""
    monkeypatch.setattr(band_kernels, "_flash_state", None)
    q, kv, indices, d_v, _ = awkward(device, False)
    assert band_variant(0)(q, kv, indices, 0.3, d_v).shape == (37, 4, d_v)
