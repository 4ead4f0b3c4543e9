"""Calibrated and uniform index generators, and union_statistics against plain Python sets."""

from __future__ import annotations

import math

import pytest
import torch

from glmcheck.data.indices import CAPTURED_TARGETS, DriftParams, calibrated_indices, uniform_indices, union_statistics

TOPK = 2048
UNION_TOLERANCE = 0.03


@pytest.fixture(scope="module")
def captured() -> dict[str, torch.Tensor]:
    """calibrated_indices (default params, seed 0) for every capture of the published table."""
    return {t.name: calibrated_indices(list(t.seq_lens), TOPK, seed=0) for t in CAPTURED_TARGETS}


@pytest.fixture(scope="module")
def captured_stats(captured) -> dict[str, dict]:
    return {t.name: union_statistics(captured[t.name], (2, 4), seq_lens=list(t.seq_lens),
                                     num_kv_rows=sum(t.seq_lens)) for t in CAPTURED_TARGETS}


@pytest.fixture(scope="module")
def uniform_4096() -> torch.Tensor:
    return uniform_indices([4096], TOPK, seed=0)


def assert_well_formed(indices: torch.Tensor, seq_lens: list[int], topk: int) -> None:
    """Causal within each sequence at its pool offset, distinct rows, prefix rule, -1 last."""
    assert indices.dtype == torch.int32 and indices.shape == (sum(seq_lens), topk)
    offset = 0
    for seq_len in seq_lens:
        local = indices[offset:offset + seq_len].long()
        t = torch.arange(seq_len)[:, None]
        valid = local >= 0
        count = valid.sum(dim=1)
        assert torch.equal(count, torch.clamp(t[:, 0] + 1, max=topk)), "valid slots != min(t + 1, topk)"
        assert torch.equal(valid, torch.arange(topk)[None, :] < count[:, None]), "-1 not trailing"
        assert (local[~valid] == -1).all(), "empty slots must be -1"
        rows = local - offset
        assert ((rows >= 0) & (rows <= t))[valid].all(), "row outside the token's causal prefix"
        ordered = torch.sort(torch.where(valid, rows, -1 - torch.arange(topk)), dim=1).values
        assert (ordered[:, 1:] != ordered[:, :-1]).all(), "duplicate row within a token"
        offset += seq_len


@pytest.mark.parametrize("target", CAPTURED_TARGETS, ids=lambda t: t.name)
def test_valid_rows_per_token_match_table(captured_stats, target):
    assert round(captured_stats[target.name]["valid_rows_per_token"]) == target.valid_rows_per_token


@pytest.mark.parametrize("target", CAPTURED_TARGETS, ids=lambda t: t.name)
def test_union_ratios_match_table(captured_stats, target):
    got = captured_stats[target.name]["union_ratio"]
    for g, want in target.union_ratio.items():
        assert abs(got[g] - want) <= UNION_TOLERANCE, f"union of {g}: {got[g]:.3f} vs {want:.2f}"


@pytest.mark.parametrize("target", CAPTURED_TARGETS, ids=lambda t: t.name)
def test_calibrated_layout(captured, target):
    assert_well_formed(captured[target.name], list(target.seq_lens), TOPK)


def test_batch_rows_are_offset_per_sequence(captured):
    idx = captured["bs2 x 4096"]
    first, second = idx[:4096], idx[4096:]
    assert first.max() < 4096
    assert second[second >= 0].min() >= 4096 and second.max() < 8192
    assert (second[0] == torch.tensor([4096] + [-1] * (TOPK - 1), dtype=torch.int32)).all()


def test_rows_are_in_score_order_with_pinned_rows_first(captured):
    idx, t, pinned = captured["bs1 x 8192"], 6000, DriftParams().sink_rows + DriftParams().local_rows
    row = idx[t]
    assert not torch.equal(row, torch.sort(row).values), "rows must not come sorted"
    expected = set(range(DriftParams().sink_rows)) | set(range(t - DriftParams().local_rows + 1, t + 1))
    assert set(row[:pinned].tolist()) == expected


def test_deterministic_by_seed():
    a = calibrated_indices([700, 300], topk=256, seed=5)
    assert torch.equal(a, calibrated_indices([700, 300], topk=256, seed=5))
    assert not torch.equal(a, calibrated_indices([700, 300], topk=256, seed=6))
    u = uniform_indices([700], topk=256, seed=5)
    assert torch.equal(u, uniform_indices([700], topk=256, seed=5))
    assert not torch.equal(u, uniform_indices([700], topk=256, seed=6))


def test_short_sequences_and_small_topk_are_well_formed():
    assert_well_formed(calibrated_indices([5, 300, 1], topk=64, seed=1), [5, 300, 1], 64)
    assert_well_formed(uniform_indices([130, 7], topk=64, seed=1), [130, 7], 64)


def test_uniform_layout_and_larger_unions(uniform_4096, captured_stats):
    assert_well_formed(uniform_4096, [4096], TOPK)
    uniform = union_statistics(uniform_4096)["union_ratio"]
    calibrated = captured_stats["bs1 x 4096"]["union_ratio"]
    assert uniform[2] > calibrated[2] + 0.1 and uniform[4] > calibrated[4] + 0.15


def python_statistics(indices: torch.Tensor, group: int, seq_lens: list[int],
                      num_kv_rows: int | None) -> tuple[float, float]:
    """(valid rows per token, union ratio) with plain Python sets; slots count, unions dedup."""
    def ok(v: int) -> bool:
        return v >= 0 and (num_kv_rows is None or v < num_kv_rows)

    rows = [[v for v in r if ok(v)] for r in indices.tolist()]
    union = slots = 0
    start = 0
    for seq_len in seq_lens:
        for g in range(seq_len // group):
            members = rows[start + g * group:start + (g + 1) * group]
            union += len(set().union(*members))
            slots += sum(len(m) for m in members)
        start += seq_len
    return sum(len(r) for r in rows) / len(rows), union / (slots / group)


@pytest.mark.parametrize("num_kv_rows, huge, dtype", [
    (60, False, torch.int32),  # out-of-range rows dropped, bitmap path
    (None, True, torch.int32),  # rows up to 2**30 kept: wide spans take the sort path
    (60, True, torch.int64),
])
def test_union_statistics_matches_python_sets(num_kv_rows, huge, dtype):
    gen = torch.Generator().manual_seed(3)
    indices = torch.randint(-3, 70, (41, 12), generator=gen)  # duplicates within rows included
    if huge:
        indices[::5, 0] = 2**30
    indices = indices.to(dtype)
    seq_lens = [23, 18]
    got = union_statistics(indices, (2, 3, 4), seq_lens=seq_lens, num_kv_rows=num_kv_rows)
    assert got["tokens"] == 41
    for g in (2, 3, 4):
        per_token, ratio = python_statistics(indices, g, seq_lens, num_kv_rows)
        assert got["valid_rows_per_token"] == pytest.approx(per_token)
        assert got["union_ratio"][g] == pytest.approx(ratio)


def test_union_statistics_small_exact_case():
    indices = torch.tensor([[0, 1, -1], [1, 2, -1], [5, 9, 9], [-1, -1, -1]], dtype=torch.int32)
    got = union_statistics(indices, (2,), seq_lens=[2, 2], num_kv_rows=6)
    assert got["valid_rows_per_token"] == pytest.approx(5 / 4)  # slots 2, 2, 1, 0
    assert got["union_ratio"][2] == pytest.approx((3 + 1) / ((2 + 2 + 1 + 0) / 2))
    assert math.isnan(union_statistics(torch.full((3, 2), -1, dtype=torch.int32))["union_ratio"][2])


@pytest.mark.parametrize("call, word", [
    (lambda: calibrated_indices([]), "seq_lens"),
    (lambda: calibrated_indices([16, 0]), "seq_lens"),
    (lambda: calibrated_indices([16], topk=0), "topk"),
    (lambda: uniform_indices([]), "seq_lens"),
    (lambda: uniform_indices([16], topk=-2), "topk"),
    (lambda: calibrated_indices([16], params=DriftParams(noise=-0.1)), "noise"),
    (lambda: union_statistics(torch.zeros(8, 4, dtype=torch.int32), group_sizes=(1,)), "group_sizes"),
    (lambda: union_statistics(torch.zeros(8, 4, dtype=torch.int32), seq_lens=[3, 4]), "seq_lens"),
    (lambda: union_statistics(torch.zeros(8, 4, dtype=torch.int32), seq_lens=[]), "seq_lens"),
    (lambda: union_statistics(torch.zeros(8, 4, dtype=torch.int32), num_kv_rows=0), "num_kv_rows"),
    (lambda: union_statistics(torch.zeros(8, dtype=torch.int32)), "indices"),
])
def test_bad_arguments_raise_value_error_naming_them(call, word):
    with pytest.raises(ValueError, match=word):
        call()


def test_float_indices_raise_type_error():
    with pytest.raises(TypeError, match="indices"):
        union_statistics(torch.zeros(8, 4))
