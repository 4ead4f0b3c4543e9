"""The union fast path: dedup contract, exactness against fp64 and the per-token path, gates."""

from __future__ import annotations

import pytest
import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.checks import metrics
from glmcheck.data.indices import drifting_indices
from glmcheck.data.inputs import poisoned_out, random_qkv
from glmcheck.kernels import sparse_mla_prefill, union_dedup
from glmcheck.kernels.union import union_dedup_forced
from glmcheck.selftest.suite import python_union
from tests.support.checks import assert_close_to_reference
from tests.support.inputs import UNION_VS_PER_TOKEN_REL_L2, overlapping_indices, set_indices, spy_union_launches

BUILDS_BY_GROUP = [(m, G) for m in ("marks", "merge", "tree", "search") for G in (2, 4, 8)]
BUILDS_BY_GROUP.append(("anchor", 2))  # the anchor build exists for pairs only


@pytest.mark.parametrize("method, G", BUILDS_BY_GROUP)
@pytest.mark.parametrize("with_length", [False, True])
def test_dedup_matches_python_sets(device, G, with_length, method):
    # a tail of T mod G tokens at every G; the search build (a binary search per slot) is the interpreter's slowest
    tokens = 43 if method == "search" else 203
    indices, kv_rows = overlapping_indices(tokens=tokens, topk=64, seed=G)
    overlap = len(set(indices[tokens - 3].tolist()) & set(indices[tokens - 2].tolist()))
    assert 32 < overlap < 64, "neighbours must overlap but differ"
    topk_length = None
    if with_length:
        topk_length = torch.randint(0, 65, (tokens,), generator=torch.Generator().manual_seed(3), dtype=torch.int32)
    sets = union_dedup_forced(indices.to(device), G, None if topk_length is None else topk_length.to(device),
                       num_kv_rows=kv_rows, method=method)
    expected = python_union(indices, G, kv_rows, topk_length)
    assert sets.lengths.shape[0] == tokens // G == len(expected)
    rows, bits, lengths = sets.rows.cpu(), sets.bits.cpu(), sets.lengths.cpu()
    for g, owners in enumerate(expected):
        n = int(lengths[g])
        got_rows = rows[g, :n].tolist()
        assert len(got_rows) == len(set(got_rows)), f"group {g}: a row emitted twice"
        got = dict(zip(got_rows, bits[g, :n].tolist()))
        assert got == owners, f"group {g}: union or ownership bits differ"


@pytest.mark.parametrize("G", [1, 2, 8])
def test_set_indices_reads_back_each_tokens_selection(device, G):
    """tests.support.inputs.set_indices (the reference selection of cut sets in the Gluon GPU tests) gives
    each token exactly its valid rows from union_dedup's (or token_row_sets') sets, and from sets cut to
    fewer rows a subset of them."""
    from glmcheck.kernels.union import UnionSets, token_row_sets
    tokens = 64
    indices, kv_rows = overlapping_indices(tokens=tokens, topk=32, seed=G)
    indices = indices.to(device)
    sets = (token_row_sets(indices, None, kv_rows) if G == 1 else union_dedup(indices, G, num_kv_rows=kv_rows))
    read = set_indices(sets, tokens).cpu()
    cut = set_indices(UnionSets(sets.rows, sets.bits, sets.lengths // 2, G), tokens).cpu()
    for t in range(tokens):
        valid = {i for i in indices[t].tolist() if 0 <= i < kv_rows}
        got = [i for i in read[t].tolist() if i >= 0]
        assert len(got) == len(set(got)) and set(got) == valid, f"token {t}"
        assert {i for i in cut[t].tolist() if i >= 0} <= valid
    assert (cut >= 0).sum() < (read >= 0).sum()


def test_merge_build_rows_ascending_and_auto_equals_it(device):
    indices, kv_rows = overlapping_indices(tokens=40, topk=32, seed=5)
    indices = indices.to(device)
    merged = union_dedup_forced(indices, 4, num_kv_rows=kv_rows, method="merge")
    auto = union_dedup(indices, 4, num_kv_rows=kv_rows)
    for g in range(10):
        n = int(merged.lengths[g])
        rows = merged.rows[g, :n].tolist()
        assert rows == sorted(rows) and n > 0
        assert torch.equal(auto.rows[g, :n], merged.rows[g, :n]) and torch.equal(auto.bits[g, :n], merged.bits[g, :n])


@pytest.mark.parametrize("method", ["tree"])
@pytest.mark.parametrize("G, topk", [(2, 48), (4, 24), (8, 40)])
def test_sorted_output_builds_equal_merge_build_on_odd_widths(device, method, G, topk):
    """G*topk not a power of two (the tree's blocks and searches straddle list ends): rows
    (ascending), bits and lengths equal the merge build's exactly, with and without topk_length."""
    indices, kv_rows = overlapping_indices(tokens=4 * G + 1, topk=topk, seed=topk)
    lengths = torch.randint(0, topk + 1, (4 * G + 1,), generator=torch.Generator().manual_seed(G), dtype=torch.int32)
    for topk_length in (None, lengths.to(device)):
        merged = union_dedup_forced(indices.to(device), G, topk_length, num_kv_rows=kv_rows, method="merge")
        other = union_dedup_forced(indices.to(device), G, topk_length, num_kv_rows=kv_rows, method=method)
        assert torch.equal(merged.lengths, other.lengths) and int(merged.lengths.min()) >= 0
        for g in range(4):
            n = int(merged.lengths[g])
            assert torch.equal(merged.rows[g, :n], other.rows[g, :n])
            assert torch.equal(merged.bits[g, :n], other.bits[g, :n])


@pytest.mark.parametrize("method, G", BUILDS_BY_GROUP)
def test_every_build_writes_every_length(device, monkeypatch, method, G):
    """Length buffers are not zero-filled (a launch fewer each): every build kernel must write
    the length of every group, so buffers poisoned with -7 must come back equal to Python's sets."""
    import glmcheck.kernels.union as union_mod

    made = union_mod._empty_sets

    def poisoned_sets(*args, **kwargs):
        sets = made(*args, **kwargs)
        sets.lengths.fill_(-7)
        return sets

    monkeypatch.setattr(union_mod, "_empty_sets", poisoned_sets)
    indices, kv_rows = overlapping_indices(tokens=4 * G + 3, topk=32, seed=30 + G)
    sets = union_dedup_forced(indices.to(device), G, num_kv_rows=kv_rows, method=method)
    expected = python_union(indices, G, kv_rows, None)
    assert sets.lengths.tolist() == [len(owners) for owners in expected]
    empty = union_dedup_forced(indices[:G - 1].to(device), G, num_kv_rows=kv_rows, method=method)
    assert empty.lengths.numel() == 0
    no_slots = union_dedup_forced(indices[:, :0].to(device), G, num_kv_rows=kv_rows, method=method)
    assert no_slots.lengths.tolist() == [0] * ((4 * G + 3) // G)


@pytest.mark.parametrize("G", [4, 8])
def test_tree_build_carries_shared_counts_across_blocks(device, monkeypatch, G):
    """16-row blocks: every list spans several blocks, so a row's position depends on the shared
    rows counted in earlier blocks (the carry a one-block test never exercises)."""
    import glmcheck.kernels.union as union_mod

    monkeypatch.setattr(union_mod, "TREE_BLOCK", 16)
    indices, kv_rows = overlapping_indices(tokens=200, topk=64, seed=11 + G)
    indices = indices[200 - 3 * G:]  # past the causal prefix: every token selects ~58 valid rows
    merged = union_dedup_forced(indices.to(device), G, num_kv_rows=kv_rows, method="merge")
    tree = union_dedup_forced(indices.to(device), G, num_kv_rows=kv_rows, method="tree")
    assert torch.equal(merged.lengths, tree.lengths) and int(tree.lengths.min()) > 64
    for g in range(3):
        n = int(merged.lengths[g])
        assert torch.equal(merged.rows[g, :n], tree.rows[g, :n]) and torch.equal(merged.bits[g, :n], tree.bits[g, :n])


def test_merge_build_refused_where_keys_overflow_or_g_odd(device):
    indices = torch.arange(4, dtype=torch.int32, device=device).repeat(6, 1)
    with pytest.raises(ValueError, match="method='merge' needs"):
        union_dedup_forced(indices, 2, num_kv_rows=2**30, method="merge")
    with pytest.raises(ValueError, match="method='merge' needs"):
        union_dedup_forced(indices, 3, num_kv_rows=8, method="merge")
    with pytest.raises(ValueError, match="method='merge' needs"):
        union_dedup_forced(indices, 2, method="merge")  # no num_kv_rows: keys unbounded
    with pytest.raises(ValueError, match="method must be one of"):
        union_dedup_forced(indices, 2, num_kv_rows=8, method="hash")  # removed: never the fastest
    with pytest.raises(ValueError, match="method='tree' needs"):
        union_dedup_forced(indices, 4, num_kv_rows=2**29, method="tree")
    with pytest.raises(ValueError, match="method='anchor' needs G = 2"):
        union_dedup_forced(indices, 4, num_kv_rows=8, method="anchor")
    with pytest.raises(ValueError, match="method must be one of"):
        union_dedup_forced(indices, 2, num_kv_rows=8, method="bogus")
    from glmcheck.kernels.union import MARKS_AUTO_MAX_ROWS, choose_build
    assert [choose_build(g, 2048, MARKS_AUTO_MAX_ROWS) for g in (2, 4, 8)] == ["marks"] * 3
    assert [choose_build(g, 2048, MARKS_AUTO_MAX_ROWS + 1) for g in (2, 4, 8)] == ["anchor", "tree", "tree"]
    assert [choose_build(g, 2048, None) for g in (2, 4)] == ["anchor", "search"]
    sets = union_dedup(indices, 4, num_kv_rows=2**30)  # auto falls back to the search build
    assert sets.lengths.tolist() == [4] and sets.bits[:, :4].eq(15).all()
    sets = union_dedup(indices, 2, num_kv_rows=2**30)  # auto: the anchor build, int32 keys
    assert sets.lengths.tolist() == [4, 4, 4] and sets.bits[:, :4].eq(3).all()


@pytest.mark.parametrize("G", [2, 4])
@pytest.mark.parametrize("extra_row", [0, 1])
def test_merge_keys_at_the_int16_boundary(device, G, extra_row):
    """num_kv_rows*G = 32767 - (G-1) still takes int16 keys, one row more takes int32: the top
    rows (whose keys sit next to the int16 empty-slot key) must survive either way."""
    from glmcheck.kernels.union import merge_key_dtype
    kv_rows = 32767 // G + extra_row
    assert merge_key_dtype(G, kv_rows) == (torch.int32 if extra_row else torch.int16)
    top = torch.arange(kv_rows - 8, kv_rows, dtype=torch.int32)
    indices = top.repeat(2 * G, 1)
    indices[G - 1, :4] = torch.tensor([-1, kv_rows, 5, kv_rows - 20], dtype=torch.int32)  # last token of group 0
    indices[2 * G - 1, 7] = 0
    for method in ("merge", "tree") if G > 2 else ("merge",):
        sets = union_dedup_forced(indices.to(device), G, num_kv_rows=kv_rows, method=method)
        for g, owners in enumerate(python_union(indices, G, kv_rows, None)):
            n = int(sets.lengths[g])
            assert dict(zip(sets.rows[g, :n].tolist(), sets.bits[g, :n].tolist())) == owners, f"{method} group {g}"


@pytest.mark.parametrize("extra_row", [0, 1])
def test_anchor_build_at_the_int16_boundary_and_across_blocks(device, monkeypatch, extra_row):
    """The anchor keys are the rows themselves: 32767 rows still sort as int16, one more as int32.
    Top rows sit next to the int16 empty key; 4-row blocks make the anchor count and the append
    position carry across blocks in both passes."""
    from glmcheck.kernels import union as union_mod
    monkeypatch.setattr(union_mod, "ANCHOR_BLOCK", 4)
    kv_rows = 32767 + extra_row
    assert union_mod.merge_key_dtype(1, kv_rows) == (torch.int32 if extra_row else torch.int16)
    g = torch.Generator().manual_seed(extra_row)
    top = torch.arange(kv_rows - 12, kv_rows, dtype=torch.int32)
    indices = torch.stack([top[torch.randperm(12, generator=g)] for _ in range(5)])
    indices[1, :5] = torch.tensor([-1, kv_rows, 5, kv_rows - 20, 0], dtype=torch.int32)
    indices[2, 3] = kv_rows + 7
    topk_length = torch.tensor([12, 11, 9, 12, 12], dtype=torch.int32)
    for length in (None, topk_length):
        sets = union_dedup_forced(indices.to(device), 2, None if length is None else length.to(device),
                           num_kv_rows=kv_rows, method="anchor")
        for pair, owners in enumerate(python_union(indices, 2, kv_rows, length)):
            n = int(sets.lengths[pair])
            got_rows = sets.rows[pair, :n].tolist()
            assert len(got_rows) == len(set(got_rows)), f"pair {pair}: a row emitted twice"
            assert dict(zip(got_rows, sets.bits[pair, :n].tolist())) == owners, f"pair {pair}"


def test_dedup_without_kv_rows_drops_only_negative_slots(device):
    indices = torch.tensor([[5, -1, 7, 10**6], [7, 8, -3, 5]], dtype=torch.int32, device=device)
    sets = union_dedup(indices, 2)
    n = int(sets.lengths[0])
    got = dict(zip(sets.rows[0, :n].tolist(), sets.bits[0, :n].tolist()))
    assert got == {5: 3, 7: 3, 10**6: 1, 8: 2}


def _inputs(tokens, heads, topk, seed, d_v=64, d_tail=16, **kw):
    indices, kv_rows = overlapping_indices(tokens, topk, seed, **kw)
    q, kv = random_qkv(tokens, heads, kv_rows, d_v, d_tail, torch.Generator().manual_seed(seed), "cpu")
    return q, kv, indices, (d_v + d_tail) ** -0.5, d_v


@pytest.mark.parametrize("heads, G", [(8, 2), (8, 4), (16, 2), (8, 8), (16, 4)])
def test_union_exact_vs_reference_and_per_token(device, monkeypatch, heads, G):
    tokens = 45  # odd: a tail of T mod G tokens takes the per-token path
    q, kv, indices, scale, d_v = (t.to(device) if isinstance(t, torch.Tensor) else t
                                  for t in _inputs(tokens, heads, 64, seed=heads + G))
    topk_length = torch.randint(0, 65, (tokens,), generator=torch.Generator().manual_seed(9),
                                dtype=torch.int32).to(device)
    calls = spy_union_launches(monkeypatch)
    union_out = poisoned_out(tokens, heads, d_v, device)
    sparse_mla_prefill(q, kv, indices, scale, d_v, topk_length=topk_length, out=union_out, union=G)
    assert calls == [G], "the union path did not run"
    per_token = sparse_mla_prefill(q, kv, indices, scale, d_v, topk_length=topk_length)
    ref = sparse_mla_reference(q, kv, indices, scale, d_v, topk_length=topk_length)
    assert_close_to_reference(union_out, ref)
    rel = metrics.rel_l2(union_out, per_token)
    assert rel <= UNION_VS_PER_TOKEN_REL_L2, f"union vs per-token rel-L2 {rel:.3e}"
    tail = tokens - tokens % G
    if tail < tokens:
        assert torch.equal(union_out[tail:], per_token[tail:]), "tail tokens must equal the per-token path"


def test_union_is_deterministic(device):
    q, kv, indices, scale, d_v = (t.to(device) if isinstance(t, torch.Tensor) else t
                                  for t in _inputs(33, 8, 48, seed=4))
    first = sparse_mla_prefill(q, kv, indices, scale, d_v, union=4)
    assert torch.equal(first, sparse_mla_prefill(q, kv, indices, scale, d_v, union=4))


@pytest.mark.parametrize("heads, G", [(4, 2), (12, 2), (6, 4), (16, 8), (32, 4), (64, 2), (1, 4), (1, 8)])
def test_illegal_union_falls_back_bitwise(device, monkeypatch, heads, G):
    q, kv, indices, scale, d_v = (t.to(device) if isinstance(t, torch.Tensor) else t
                                  for t in _inputs(10, heads, 32, seed=heads))
    calls = spy_union_launches(monkeypatch)
    union = sparse_mla_prefill(q, kv, indices, scale, d_v, union=G)
    assert calls == []
    assert torch.equal(union, sparse_mla_prefill(q, kv, indices, scale, d_v))


def test_fewer_tokens_than_group_runs_per_token(device, monkeypatch):
    q, kv, indices, scale, d_v = (t.to(device) if isinstance(t, torch.Tensor) else t
                                  for t in _inputs(3, 8, 16, seed=2))
    calls = spy_union_launches(monkeypatch)
    assert torch.equal(sparse_mla_prefill(q, kv, indices, scale, d_v, union=4),
                       sparse_mla_prefill(q, kv, indices, scale, d_v))
    assert calls == []


def test_deterministic_gate(device, monkeypatch):
    q, kv, indices, scale, d_v = (t.to(device) if isinstance(t, torch.Tensor) else t
                                  for t in _inputs(16, 8, 32, seed=5))
    per_token = sparse_mla_prefill(q, kv, indices, scale, d_v)
    calls = spy_union_launches(monkeypatch)
    gated = sparse_mla_prefill(q, kv, indices, scale, d_v, union=2, deterministic=True)
    assert calls == [] and torch.equal(gated, per_token)
    sparse_mla_prefill(q, kv, indices, scale, d_v, union=2)
    assert calls == [2]


def test_bad_dedup_group_raises(device):
    indices = torch.zeros((4, 4), dtype=torch.int32, device=device)
    for bad in (1, 9, 2.0):
        with pytest.raises(ValueError, match="G must be an int"):
            union_dedup(indices, bad)
    with pytest.raises(TypeError, match=r"indices must be torch\.int32"):
        union_dedup(indices.long(), 2)


# ---- real shapes on the GPU -------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("heads, G, tokens", [(8, 2, 4096), (8, 4, 4096), (16, 2, 4096), (8, 4, 1023),
                                             (8, 8, 4093), (16, 4, 4096), (32, 2, 4096)])
def test_gpu_union_real_shape(monkeypatch, heads, G, tokens):
    device = torch.device("cuda")
    indices = drifting_indices([tokens], 2048, 0.10, seed=G).to(device)
    q, kv = random_qkv(tokens, heads, tokens, 512, 64, torch.Generator().manual_seed(G), device)
    calls = spy_union_launches(monkeypatch)
    out = poisoned_out(tokens, heads, 512, device)
    sparse_mla_prefill(q, kv, indices, 576 ** -0.5, 512, out=out, union=G)
    assert calls == [G]
    ref = sparse_mla_reference(q, kv, indices, 576 ** -0.5, 512)
    assert_close_to_reference(out, ref)
    per_token = sparse_mla_prefill(q, kv, indices, 576 ** -0.5, 512)
    assert metrics.rel_l2(out, per_token) <= UNION_VS_PER_TOKEN_REL_L2
    assert torch.equal(out, sparse_mla_prefill(q, kv, indices, 576 ** -0.5, 512, union=G))


@pytest.mark.gpu
@pytest.mark.parametrize("heads, G", [(8, 0), (8, 2), (8, 8)])
def test_gpu_graph_capture_runs_the_requested_path(monkeypatch, heads, G):
    """A CUDA graph captures the per-token path, the Triton union tile (G = 2) and, on sm_90, the
    Gluon tile (G = 8): replays equal the eager call bitwise, also after q and the indices change
    in place (the graph re-reads its inputs; its union buffers live in the graph's pool)."""
    device = torch.device("cuda")
    tokens, topk = 515, 256  # a tail of 3 tokens at G = 8, 1 at G = 2
    indices = drifting_indices([tokens], topk, 0.10, seed=1).to(device)
    q, kv = random_qkv(tokens, heads, tokens, 512, 64, torch.Generator().manual_seed(1), device)
    scale = 576 ** -0.5
    out = poisoned_out(tokens, heads, 512, device)
    sparse_mla_prefill(q, kv, indices, scale, 512, out=out, union=G)  # compile outside the capture
    calls = spy_union_launches(monkeypatch)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sparse_mla_prefill(q, kv, indices, scale, 512, out=out, union=G)
    assert calls == ([G] if G else [])
    for step in range(2):
        if step:
            q.copy_(random_qkv(tokens, heads, tokens, 512, 64, torch.Generator().manual_seed(2), device)[0])
            indices.copy_(drifting_indices([tokens], topk, 0.10, seed=2).to(device))
        expected = sparse_mla_prefill(q, kv, indices, scale, 512, union=G)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, expected), f"replay {step} differs from the eager call"


def test_triton_union_tile_on_cut_sets_matches_the_selection_they_hold(device):
    """The Triton union tile on union-8 sets cut to 0, 1, 13, 16, 17, 31, 32, 33 rows (an empty group,
    partial blocks): every output written, empty groups zero, the rest within the gate of fp64 over the
    selection the cut sets hold (`set_indices`); reading them without the ownership bits would not be."""
    from glmcheck.kernels import tiles
    from glmcheck.kernels.prefill import LOG2E
    from glmcheck.kernels.union import UnionSets, launch_union_attention
    from glmcheck.kernels.validate import PrefillArgs
    heads, group, tokens = 8, 8, 128
    indices = drifting_indices([tokens], 64, 0.10, seed=heads).to(device)
    q, kv = random_qkv(tokens, heads, tokens, 512, 64, torch.Generator().manual_seed(heads), device)
    args = PrefillArgs(q, kv, indices, None, 576 ** -0.5, 512)
    whole = union_dedup(indices, group, num_kv_rows=tokens)
    cuts = torch.tensor([0, 1, 13, 16, 17, 31, 32, 33], dtype=torch.int32, device=device)
    cut = UnionSets(whole.rows, whole.bits, torch.minimum(whole.lengths, cuts.repeat(whole.lengths.numel() // 8)),
                    group)
    tile = tiles.table_tile("union", group * heads, device)
    out = poisoned_out(tokens, heads, 512, device)
    launch_union_attention(args, cut, out, tile, False, LOG2E * args.sm_scale)
    assert not out.isnan().any(), "outputs of cut sets left unwritten"
    empty = (cut.lengths == 0).repeat_interleave(group)
    assert empty.any() and (out[empty] == 0).all(), "an empty group is not zero"
    held = sparse_mla_reference(q, kv, set_indices(cut, tokens), 576 ** -0.5, 512)
    assert_close_to_reference(out[~empty], held[~empty])
    unowned = set_indices(UnionSets(cut.rows, torch.full_like(cut.bits, 255), cut.lengths, group), tokens)
    assert metrics.rel_l2(out[~empty], sparse_mla_reference(q, kv, unowned, 576 ** -0.5, 512)[~empty]) > 0.1
