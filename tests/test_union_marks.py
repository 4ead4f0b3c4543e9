"""The marks union build: its prefix guard (exact prefixes written directly, near misses built from the table),
programs that build many groups (the table row cleared between them), and its refusals."""

from __future__ import annotations

import pytest
import torch

from glmcheck.kernels.union import union_dedup_forced
from glmcheck.selftest.suite import python_union


def _prefix_batch(topk: int, seq_len: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two sequences of seq_len tokens in one pool: token t < topk of each selects its causal prefix (shuffled slots,
    the rest -1; the second's from row seq_len), later ones random rows of their prefix. Near misses planted in the
    first: a prefix with one row swapped for a later row, the range 1..t+1 (a range, but not from the group's
    lowest row), an empty token, one whose topk_length cuts its prefix; in the second, a range with a gap."""
    g = torch.Generator().manual_seed(seed)
    tokens = 2 * seq_len
    indices = torch.full((tokens, topk), -1, dtype=torch.int32)
    for t in range(tokens):
        local = t % seq_len
        offset = t - local
        count = min(local + 1, topk)
        rows = torch.randperm(local + 1, generator=g)[:count].to(torch.int32) + offset
        indices[t, torch.randperm(topk, generator=g)[:count]] = rows
    indices[5, (indices[5] == 3).nonzero()[0, 0]] = 9  # count 6, high 9: not rows 0..5
    indices[9] = torch.where(indices[9] >= 0, indices[9] + 1, -1)  # rows 1..10
    indices[12] = -1  # no valid slot: an empty prefix
    indices[seq_len + 6] = torch.where(indices[seq_len + 6] == seq_len + 2, -1, indices[seq_len + 6])  # a gap
    topk_length = torch.full((tokens,), topk, dtype=torch.int32)
    topk_length[14] = 7
    return indices, topk_length


def _assert_equals_python(sets, indices: torch.Tensor, G: int, kv_rows: int, topk_length) -> None:
    expected = python_union(indices, G, kv_rows, topk_length)
    assert sets.lengths.shape[0] == len(expected)
    rows, bits, lengths = sets.rows.cpu(), sets.bits.cpu(), sets.lengths.cpu()
    for g, owners in enumerate(expected):
        n = int(lengths[g])
        got_rows = rows[g, :n].tolist()
        assert got_rows == sorted(set(got_rows)), f"group {g}: rows not ascending and distinct"
        assert dict(zip(got_rows, bits[g, :n].tolist())) == owners, f"group {g}: union or ownership bits differ"


def _assert_prefix_batch_builds(device, G: int, topk: int, seq_len: int, seed: int) -> None:
    """The marks build of `_prefix_batch` equals Python's sets, without and with topk_length."""
    indices, topk_length = _prefix_batch(topk, seq_len, seed=seed)
    for length in (None, topk_length):
        sets = union_dedup_forced(indices.to(device), G, None if length is None else length.to(device),
                                  num_kv_rows=2 * seq_len, method="marks")
        _assert_equals_python(sets, indices, G, 2 * seq_len, length)


@pytest.mark.parametrize("G", [2, 4, 8])
@pytest.mark.parametrize("programs", [3, None])
def test_marks_build_prefix_guard_and_near_misses(device, monkeypatch, G, programs):
    """Every group, prefix or not, equals Python's sets; with 3 programs each builds ~10 groups in turn, so a table
    row left dirty by one group would corrupt the next."""
    import glmcheck.kernels.union as union_mod
    if programs is not None:
        monkeypatch.setattr(union_mod, "MARKS_PROGRAMS", programs)
    topk, seq_len = 16, 40
    _assert_prefix_batch_builds(device, G, topk, seq_len, seed=G)
    prefixes = torch.full((G, topk), -1, dtype=torch.int32)
    for t in range(G):
        prefixes[t, topk - t - 1:] = torch.arange(t, -1, -1, dtype=torch.int32)
    first = union_dedup_forced(prefixes.to(device), G, num_kv_rows=2 * seq_len, method="marks")
    assert first.lengths.tolist() == [G] and first.rows[0, :G].tolist() == list(range(G))
    assert first.bits[0, :G].tolist() == [(2**G - 1) & ~(2**r - 1) for r in range(G)]  # row r: tokens r..G-1


def test_marks_build_scratch_capped_and_rows_out_of_range(device, monkeypatch):
    """A table cap below one row per group leaves one program building every group; rows past num_kv_rows and
    negative ones are empty slots."""
    import glmcheck.kernels.union as union_mod
    monkeypatch.setattr(union_mod, "MARKS_SCRATCH_BYTES", 10)
    assert union_mod.marks_programs(50, 64) == 1 and union_mod.marks_programs(0, 64) == 1
    indices = torch.tensor([[3, 64, -1, 7], [7, 1, 70, 0], [2, 3, 1, 0], [1, 0, 3, 2]], dtype=torch.int32)
    sets = union_dedup_forced(indices.to(device), 2, num_kv_rows=64, method="marks")
    _assert_equals_python(sets, indices, 2, 64, None)
    assert sets.lengths.tolist() == [4, 4]


def test_marks_build_needs_num_kv_rows(device):
    indices = torch.arange(4, dtype=torch.int32, device=device).repeat(4, 1)
    with pytest.raises(ValueError, match="method='marks' needs num_kv_rows"):
        union_dedup_forced(indices, 2, method="marks")


@pytest.mark.parametrize("G", [2, 3, 8])
def test_marks_build_steps_smaller_than_topk(device, monkeypatch, G):
    """Steps of fewer slots than topk (the first pass reads every token's row in several blocks, the scan spans
    several steps) and 4 programs building several groups each give Python's sets; G = 3 leaves a member lane of
    the first pass's [4, BLOCK] block without a token."""
    import glmcheck.kernels.union as union_mod
    monkeypatch.setattr(union_mod, "MARKS_BLOCK", 8)
    monkeypatch.setattr(union_mod, "MARKS_PROGRAMS", 4)
    _assert_prefix_batch_builds(device, G, topk=16, seq_len=40, seed=G + 1)
