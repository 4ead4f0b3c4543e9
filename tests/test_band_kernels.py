"""The noise band's flash-style kernels (glmcheck.backends.band_kernels): each within bf16 rounding
of the fp64 reference on awkward inputs, no two of a band alike, a clear limit on k."""

from __future__ import annotations

import itertools

import pytest
import torch

from glmcheck.backends.band_kernels import BAND_FAMILY, BAND_FAMILY_SIZE, FlashVariant, flash_sparse_mla
from glmcheck.backends.forms import BAND_ENV
from glmcheck.backends.reference import band_variant, sparse_mla_reference
from glmcheck.checks import metrics
from glmcheck.data.inputs import random_qkv
from tests.support.band_inputs import awkward, realistic

U = 2.0 ** -8  # bf16 unit roundoff (8 significant bits)


@pytest.mark.parametrize("impl", ["torch", "triton"])
@pytest.mark.parametrize("topk_length", [False, True])
def test_every_variant_is_the_reference_within_bf16_rounding(device, topk_length, impl, monkeypatch):
    """Bound per element: |out - exact| <= 3 u max_j |v_j| (u = 2^-8; j over the token's valid rows,
    per value dimension): u from rounding P (a convex combination of the v_j, each weight off by at
    most u), u from the normaliser (rounded P summed, or fp32 P against rounded weights), u from
    rounding the output, plus 1e-6 for the fp32 arithmetic. rel-L2 <= u overall."""
    monkeypatch.setenv(BAND_ENV, impl)  # both forms of the band (glmcheck.backends.band_triton)
    q, kv, indices, d_v, length = awkward(device, topk_length)
    exact = sparse_mla_reference(q, kv, indices, 0.3, d_v, topk_length=length)
    valid = (indices >= 0) & (indices < kv.shape[0])
    if length is not None:
        valid &= torch.arange(indices.shape[1], device=indices.device)[None, :] < length[:, None]
    values = kv[torch.where(valid, indices, 0).long()][..., :d_v].double().abs() * valid[..., None]
    bound = 3 * U * values.amax(dim=1)[:, None, :] + 1e-6  # [T, 1, d_v]
    empty = ~valid.any(dim=1)
    assert bool(empty[5]) and (length is None or bool(empty[9]))
    for k in range(BAND_FAMILY_SIZE):
        out = band_variant(k)(q, kv, indices, 0.3, d_v, topk_length=length)
        assert out.dtype == torch.bfloat16 and out.shape == exact.shape and out.device == q.device
        assert bool(torch.isfinite(out).all()), (k, "an all-masked block gave NaN")
        assert bool((out[empty] == 0).all()), (k, "a token with no valid slot gives zeros")
        error = (out.double() - exact).abs()
        assert bool((error <= bound).all()), (k, BAND_FAMILY[k], float((error / bound).max()))
        assert metrics.rel_l2(out, exact) <= U, (k, metrics.rel_l2(out, exact))


def test_chunks_do_not_change_the_result(device, monkeypatch):
    monkeypatch.setenv(BAND_ENV, "torch")  # the Triton form: tests/test_band_triton.py
    q, kv, indices, d_v, length = awkward(device, True)
    spec = FlashVariant(16, reverse=True, sum_rounded=True)
    whole = flash_sparse_mla(q, kv, indices, 0.3, d_v, topk_length=length, variant=spec)
    tiny = flash_sparse_mla(q, kv, indices, 0.3, d_v, topk_length=length, variant=spec, budget_bytes=1)
    assert bool((tiny[5] == 0).all())
    if tiny.device.type == "cpu":
        assert torch.equal(tiny, whole), "every token's arithmetic is independent of its chunk"
    else:  # cuBLAS may pick another algorithm per batch size
        assert metrics.rel_l2(tiny, whole) < 1e-3


def assert_distinct(outputs: list[torch.Tensor], exact: torch.Tensor) -> None:
    """No two outputs alike: each pair at least 0.1 x their smallest distance to the exact
    reference apart (seeded summation orders in fp32, the previous band, come to ~0.01)."""
    floor = 0.1 * min(metrics.rel_l2(o, exact) for o in outputs)
    for a, b in itertools.combinations(range(len(outputs)), 2):
        apart = metrics.rel_l2(outputs[a], outputs[b])
        assert apart > floor, f"band:{a} and band:{b} are {apart:.2e} apart (< {floor:.2e}): not distinct samples"


@pytest.mark.parametrize("size", [4, 8])
def test_no_two_band_variants_alike(device, size):
    q, kv, indices, length = realistic(device)
    exact = sparse_mla_reference(q, kv, indices, 0.125, 64, topk_length=length)
    assert_distinct([band_variant(k)(q, kv, indices, 0.125, 64, topk_length=length) for k in range(size)], exact)


def test_the_family_and_its_limit():
    assert BAND_FAMILY_SIZE == 16 and len(set(BAND_FAMILY)) == 16, "16 distinct kernels"
    every = set(itertools.product((16, 32, 64, 128), (False, True), (False, True)))
    assert {(v.block, v.reverse, v.sum_rounded) for v in BAND_FAMILY} == every, "every block x order x normaliser once"
    assert {v.splits for v in BAND_FAMILY[:4]} == {1, 2}
    assert {v.block for v in BAND_FAMILY[:4]} == {16, 32, 64} and {v.reverse for v in BAND_FAMILY[:4]} == {False, True}
    assert {v.block for v in BAND_FAMILY[:8]} == {16, 32, 64, 128}
    assert {v.sum_rounded for v in BAND_FAMILY[:4]} == {False, True}
    for bad in (16, -1, True, 2.0):
        with pytest.raises(ValueError, match=r"\[0, 15\].*at most 16"):
            band_variant(bad)


def test_short_selections_keep_the_band_distinct(device):
    """Every token selects 2 to 16 slots (a prompt of a few tokens: each selection fits one KV block of
    every size), where block size and order cannot matter: the split-KV variants keep the default band
    of 4 distinct (without them band:0 = band:1 and band:2 = band:3)."""
    g = torch.Generator().manual_seed(3)
    q, kv = random_qkv(48, 8, 64, 64, 16, g, "cpu")
    q = (q.float() * 3).bfloat16()
    indices = torch.full((48, 32), -1, dtype=torch.int32)
    for t in range(48):
        count = 2 + t % 15
        indices[t, :count] = torch.randperm(64, generator=g)[:count].to(torch.int32)
    device = torch.device(device)
    q, kv, indices = q.to(device), kv.to(device), indices.to(device)
    exact = sparse_mla_reference(q, kv, indices, 0.125, 64)
    assert_distinct([band_variant(k)(q, kv, indices, 0.125, 64) for k in range(4)], exact)


@pytest.mark.parametrize("k", [0, 1, 3, 6])
def test_blocks_no_token_uses_are_skipped_without_changing_a_value(device, k, monkeypatch):
    """A short prompt under a long top-k (a token t selects its t + 1 causal rows, its other slots empty, as the
    indexer gives them): the kernel runs only the blocks some token uses, and its output is the one of running every
    block, value for value."""
    from glmcheck.backends import band_kernels

    monkeypatch.setenv(BAND_ENV, "torch")  # the Triton form skips per token, inside its loop
    g = torch.Generator().manual_seed(5)
    tokens, topk = 21, 300
    q, kv = random_qkv(tokens, 4, 64, 32, 16, g, "cpu")
    indices = torch.full((tokens, topk), -1, dtype=torch.int32)
    for t in range(tokens):
        indices[t, : t + 1] = torch.randperm(t + 1, generator=g).int()
    q, kv, indices = q.to(device), kv.to(device), indices.to(device)
    skipped = band_variant(k)(q, kv, indices, 0.25, 32)
    ran = []
    real = band_kernels._blocks_occupied

    def every_block(valid, block):
        occupied = real(valid, block)
        ran.append(int(occupied.sum()))
        return torch.ones_like(occupied)

    monkeypatch.setattr(band_kernels, "_blocks_occupied", every_block)
    every = band_variant(k)(q, kv, indices, 0.25, 32)
    assert torch.equal(skipped, every)  # == on bf16: a zero's sign aside, the same values
    assert ran and max(ran) < -(-topk // BAND_FAMILY[k].block), "blocks past the prompt were left out"


@pytest.mark.parametrize("topk_length", [False, True])
def test_rows_from_the_fp32_table_are_the_rows_converted_per_block(device, monkeypatch, topk_length):
    """The band reads a block's rows from an fp32 copy of the KV with a zero row for unselected slots, or (a KV past
    TABLE_BYTES) converts and masks them per block: the same values, so every variant's output is the same bits. The
    KV holds -0.0 values and a NaN in row 0, which no token selects (an empty slot must not read it either way)."""
    from glmcheck.backends import band_kernels

    monkeypatch.setenv(BAND_ENV, "torch")  # the Triton form reads the bf16 rows it selects, masked
    q, kv, indices, d_v, length = awkward(device, topk_length)
    kv = kv.clone()
    kv[1, :5] = -0.0
    indices = torch.where(indices == 0, -1, indices)  # no token selects row 0 any more: it holds a NaN
    kv[0, 3] = float("nan")
    for k in range(BAND_FAMILY_SIZE):
        table = band_variant(k)(q, kv, indices, 0.3, d_v, topk_length=length)
        monkeypatch.setattr(band_kernels, "TABLE_BYTES", 0)
        per_block = band_variant(k)(q, kv, indices, 0.3, d_v, topk_length=length)
        monkeypatch.undo()
        assert torch.equal(table.view(torch.int16), per_block.view(torch.int16)), k
        assert bool(torch.isfinite(table).all()), k


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_reference_reads_the_same_rows_from_its_table(device, monkeypatch, dtype):
    """The exact reference's rows from a copy of the KV in its dtype with a zero row for unselected slots, or
    converted and masked per chunk (a KV past TABLE_BYTES): the same bits; a NaN in unselected row 0 stays out."""
    from glmcheck.backends import reference

    q, kv, indices, d_v, length = awkward(device, True)
    kv = kv.clone()
    indices = torch.where(indices == 0, -1, indices)
    kv[0, 3] = float("nan")
    table = sparse_mla_reference(q, kv, indices, 0.3, d_v, topk_length=length, dtype=dtype)
    monkeypatch.setattr(reference, "TABLE_BYTES", 0)
    per_chunk = sparse_mla_reference(q, kv, indices, 0.3, d_v, topk_length=length, dtype=dtype)
    assert torch.equal(table, per_chunk) and bool(torch.isfinite(table).all())
