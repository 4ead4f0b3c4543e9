"""The union fast path: dedup contract, exactness against fp64 and the per-token path, gates."""

from __future__ import annotations

import pytest
import torch

from glmcheck import metrics
from glmcheck.indices import drifting_indices
from glmcheck.inputs import poisoned_out, random_qkv
from glmcheck.kernels import prefill, sparse_mla_prefill, union_dedup
from glmcheck.reference import sparse_mla_reference
from glmcheck.selftest.suite import python_union
from tests.helpers import assert_close_to_reference

# Summation order and the running max at which P is rounded to bf16 differ, nothing else:
# measured 1.00e-3 on the H200 at 4096 tokens (each path is 1.95e-3 from fp64); an ignored
# ownership mask gives 0.59.
UNION_VS_PER_TOKEN_REL_L2 = 2e-3


def overlapping_indices(tokens: int, topk: int, seed: int, swap: float = 0.2,
                        dirt: float = 0.1, kv_rows: int | None = None) -> tuple[torch.Tensor, int]:
    """Neighbours share most rows but not all; some slots -1 or out of range. Returns (idx, S)."""
    base = drifting_indices([tokens], topk, swap, seed=seed)
    kv_rows = kv_rows or tokens
    g = torch.Generator().manual_seed(seed + 1)
    roll = torch.rand(base.shape, generator=g)
    junk = torch.where(torch.rand(base.shape, generator=g) < 0.5,
                       torch.full_like(base, -1),
                       torch.randint(kv_rows, kv_rows + 1000, base.shape, generator=g, dtype=torch.int32))
    junk[::3] = -5
    return torch.where(roll < dirt, junk, base), kv_rows


BUILDS_BY_GROUP = [(m, G) for m in ("merge", "tree", "bitonic", "search", "hash") for G in (2, 4, 8)]
BUILDS_BY_GROUP.append(("anchor", 2))  # the anchor build exists for pairs only


@pytest.mark.parametrize("method, G", BUILDS_BY_GROUP)
@pytest.mark.parametrize("with_length", [False, True])
def test_dedup_matches_python_sets(device, G, with_length, method):
    indices, kv_rows = overlapping_indices(tokens=203, topk=64, seed=G)
    overlap = len(set(indices[150].tolist()) & set(indices[151].tolist()))
    assert 32 < overlap < 64, "neighbours must overlap but differ"
    topk_length = None
    if with_length:
        topk_length = torch.randint(0, 65, (203,), generator=torch.Generator().manual_seed(3), dtype=torch.int32)
    sets = union_dedup(indices.to(device), G, None if topk_length is None else topk_length.to(device),
                       num_kv_rows=kv_rows, method=method)
    expected = python_union(indices, G, kv_rows, topk_length)
    assert sets.lengths.shape[0] == 203 // G == len(expected)
    rows, bits, lengths = sets.rows.cpu(), sets.bits.cpu(), sets.lengths.cpu()
    for g, owners in enumerate(expected):
        n = int(lengths[g])
        got_rows = rows[g, :n].tolist()
        assert len(got_rows) == len(set(got_rows)), f"group {g}: a row emitted twice"
        got = dict(zip(got_rows, bits[g, :n].tolist()))
        assert got == owners, f"group {g}: union or ownership bits differ"


def test_merge_build_rows_ascending_and_auto_equals_it(device):
    indices, kv_rows = overlapping_indices(tokens=40, topk=32, seed=5)
    indices = indices.to(device)
    merged = union_dedup(indices, 4, num_kv_rows=kv_rows, method="merge")
    auto = union_dedup(indices, 4, num_kv_rows=kv_rows)
    for g in range(10):
        n = int(merged.lengths[g])
        rows = merged.rows[g, :n].tolist()
        assert rows == sorted(rows) and n > 0
        assert torch.equal(auto.rows[g, :n], merged.rows[g, :n]) and torch.equal(auto.bits[g, :n], merged.bits[g, :n])


@pytest.mark.parametrize("method", ["bitonic", "tree"])
@pytest.mark.parametrize("G, topk", [(2, 48), (4, 24), (8, 40)])
def test_sorted_output_builds_equal_merge_build_on_odd_widths(device, method, G, topk):
    """G*topk not a power of two (the in-register sort pads to the next one; the tree's blocks
    and searches straddle list ends): rows (ascending), bits and lengths equal the merge build's
    exactly, with and without topk_length."""
    indices, kv_rows = overlapping_indices(tokens=4 * G + 1, topk=topk, seed=topk)
    lengths = torch.randint(0, topk + 1, (4 * G + 1,), generator=torch.Generator().manual_seed(G), dtype=torch.int32)
    for topk_length in (None, lengths.to(device)):
        merged = union_dedup(indices.to(device), G, topk_length, num_kv_rows=kv_rows, method="merge")
        other = union_dedup(indices.to(device), G, topk_length, num_kv_rows=kv_rows, method=method)
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
    sets = union_dedup(indices.to(device), G, num_kv_rows=kv_rows, method=method)
    expected = python_union(indices, G, kv_rows, None)
    assert sets.lengths.tolist() == [len(owners) for owners in expected]
    empty = union_dedup(indices[:G - 1].to(device), G, num_kv_rows=kv_rows, method=method)
    assert empty.lengths.numel() == 0
    no_slots = union_dedup(indices[:, :0].to(device), G, num_kv_rows=kv_rows, method=method)
    assert no_slots.lengths.tolist() == [0] * ((4 * G + 3) // G)


@pytest.mark.parametrize("G", [4, 8])
def test_tree_build_carries_shared_counts_across_blocks(device, monkeypatch, G):
    """16-row blocks: every list spans several blocks, so a row's position depends on the shared
    rows counted in earlier blocks (the carry a one-block test never exercises)."""
    import glmcheck.kernels.union as union_mod

    monkeypatch.setattr(union_mod, "TREE_BLOCK", 16)
    indices, kv_rows = overlapping_indices(tokens=200, topk=64, seed=11 + G)
    indices = indices[200 - 3 * G:]  # past the causal prefix: every token selects ~58 valid rows
    merged = union_dedup(indices.to(device), G, num_kv_rows=kv_rows, method="merge")
    tree = union_dedup(indices.to(device), G, num_kv_rows=kv_rows, method="tree")
    assert torch.equal(merged.lengths, tree.lengths) and int(tree.lengths.min()) > 64
    for g in range(3):
        n = int(merged.lengths[g])
        assert torch.equal(merged.rows[g, :n], tree.rows[g, :n]) and torch.equal(merged.bits[g, :n], tree.bits[g, :n])


def test_merge_build_refused_where_keys_overflow_or_g_odd(device):
    indices = torch.arange(4, dtype=torch.int32, device=device).repeat(6, 1)
    with pytest.raises(ValueError, match="method='merge' needs"):
        union_dedup(indices, 2, num_kv_rows=2**30, method="merge")
    with pytest.raises(ValueError, match="method='merge' needs"):
        union_dedup(indices, 3, num_kv_rows=8, method="merge")
    with pytest.raises(ValueError, match="method='merge' needs"):
        union_dedup(indices, 2, method="merge")  # no num_kv_rows: keys unbounded
    with pytest.raises(ValueError, match="method='bitonic' needs"):
        union_dedup(indices, 2, num_kv_rows=2**30, method="bitonic")
    with pytest.raises(ValueError, match="method='tree' needs"):
        union_dedup(indices, 4, num_kv_rows=2**29, method="tree")
    with pytest.raises(ValueError, match="method='anchor' needs G = 2"):
        union_dedup(indices, 4, num_kv_rows=8, method="anchor")
    with pytest.raises(ValueError, match="method must be one of"):
        union_dedup(indices, 2, num_kv_rows=8, method="bogus")
    from glmcheck.kernels.union import choose_build
    assert [choose_build(g, 2048, True) for g in (2, 4, 8)] == ["anchor", "tree", "tree"]
    assert [choose_build(g, 2048, False) for g in (2, 4)] == ["anchor", "search"]
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
        sets = union_dedup(indices.to(device), G, num_kv_rows=kv_rows, method=method)
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
        sets = union_dedup(indices.to(device), 2, None if length is None else length.to(device),
                           num_kv_rows=kv_rows, method="anchor")
        for pair, owners in enumerate(python_union(indices, 2, kv_rows, length)):
            n = int(sets.lengths[pair])
            got_rows = sets.rows[pair, :n].tolist()
            assert len(got_rows) == len(set(got_rows)), f"pair {pair}: a row emitted twice"
            assert dict(zip(got_rows, sets.bits[pair, :n].tolist())) == owners, f"pair {pair}"


@pytest.mark.parametrize("G", [2, 8])
def test_hash_build_on_disjoint_selections_fills_half_its_table(device, G):
    """Uniform rows from a wide span: nearly every slot is a distinct row, so the table runs at its
    designed load (half full) and probes collide; every group still matches the set reference."""
    g = torch.Generator().manual_seed(G)
    tokens, topk, kv_rows = 2 * G + 1, 256, 10**6
    indices = torch.stack([torch.randperm(kv_rows, generator=g)[:topk] for _ in range(tokens)]).int()
    sets = union_dedup(indices.to(device), G, num_kv_rows=kv_rows, method="hash")
    expected = python_union(indices, G, kv_rows, None)
    assert [int(n) for n in sets.lengths] == [len(e) for e in expected]
    assert min(len(e) for e in expected) > 0.95 * G * topk
    for group, owners in enumerate(expected):
        n = int(sets.lengths[group])
        assert dict(zip(sets.rows[group, :n].tolist(), sets.bits[group, :n].tolist())) == owners


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


def _spy_union_launches(monkeypatch, kinds: list[str] | None = None) -> list[int]:
    """Record G of every union attention launch (Triton tile or warp-specialised tile); `kinds`,
    when given, records which of the two ran ("triton" / "ws"). The per-token path's Gluon launches
    (one-token sets, G = 1: the tail tokens from 17 heads on) are not union launches."""
    calls: list[int] = []
    for name, kind in (("launch_union_attention", "triton"), ("launch_union_attention_ws", "ws")):
        def spy(args, sets, *rest, _real=getattr(prefill, name), _kind=kind):
            if sets.group > 1:
                calls.append(sets.group)
                if kinds is not None:
                    kinds.append(_kind)
            return _real(args, sets, *rest)

        monkeypatch.setattr(prefill, name, spy)
    return calls


@pytest.mark.parametrize("heads, G", [(8, 2), (8, 4), (16, 2), (8, 8), (16, 4)])
def test_union_exact_vs_reference_and_per_token(device, monkeypatch, heads, G):
    tokens = 45  # odd: a tail of T mod G tokens takes the per-token path
    q, kv, indices, scale, d_v = (t.to(device) if isinstance(t, torch.Tensor) else t
                                  for t in _inputs(tokens, heads, 64, seed=heads + G))
    topk_length = torch.randint(0, 65, (tokens,), generator=torch.Generator().manual_seed(9),
                                dtype=torch.int32).to(device)
    calls = _spy_union_launches(monkeypatch)
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
    calls = _spy_union_launches(monkeypatch)
    union = sparse_mla_prefill(q, kv, indices, scale, d_v, union=G)
    assert calls == []
    assert torch.equal(union, sparse_mla_prefill(q, kv, indices, scale, d_v))


def test_fewer_tokens_than_group_runs_per_token(device, monkeypatch):
    q, kv, indices, scale, d_v = (t.to(device) if isinstance(t, torch.Tensor) else t
                                  for t in _inputs(3, 8, 16, seed=2))
    calls = _spy_union_launches(monkeypatch)
    assert torch.equal(sparse_mla_prefill(q, kv, indices, scale, d_v, union=4),
                       sparse_mla_prefill(q, kv, indices, scale, d_v))
    assert calls == []


def test_deterministic_gate(device, monkeypatch):
    q, kv, indices, scale, d_v = (t.to(device) if isinstance(t, torch.Tensor) else t
                                  for t in _inputs(16, 8, 32, seed=5))
    per_token = sparse_mla_prefill(q, kv, indices, scale, d_v)
    calls = _spy_union_launches(monkeypatch)
    gated = sparse_mla_prefill(q, kv, indices, scale, d_v, union=2, deterministic=True)
    assert calls == [] and torch.equal(gated, per_token)
    sparse_mla_prefill(q, kv, indices, scale, d_v, union=2)
    assert calls == [2]


def test_bad_dedup_group_raises(device):
    indices = torch.zeros((4, 4), dtype=torch.int32, device=device)
    for bad in (1, 9, 2.0):
        with pytest.raises(ValueError, match="G must be an int"):
            union_dedup(indices, bad)
    with pytest.raises(TypeError, match="indices must be torch.int32"):
        union_dedup(indices.long(), 2)


def test_ws_tile_refuses_what_it_cannot_run(device):
    from glmcheck.kernels.union_ws_launch import check_ws_args, ws_supports
    from glmcheck.kernels.validate import PrefillArgs
    q = torch.zeros((16, 8, 576), dtype=torch.bfloat16, device=device)
    kv = torch.zeros((32, 576), dtype=torch.bfloat16, device=device)
    indices = torch.zeros((16, 8), dtype=torch.int32, device=device)
    args = PrefillArgs(q, kv, indices, None, 0.1, 512)
    check_ws_args(args, 8)
    with pytest.raises(ValueError, match="G\\*H = 64"):
        check_ws_args(args, 4)
    with pytest.raises(ValueError, match="d_v = 512"):
        check_ws_args(PrefillArgs(q, kv, indices, None, 0.1, 256), 8)
    with pytest.raises(ValueError, match="16-byte boundaries"):
        check_ws_args(PrefillArgs(q, kv.view(-1)[4:4 + 31 * 576].view(31, 576), indices, None, 0.1, 512), 8)
    import triton

    from glmcheck.kernels.union_ws_launch import gluon_version_supported
    expected = device.type == "cuda" and torch.cuda.get_device_capability() == (9, 0) \
        and gluon_version_supported(triton.__version__)
    assert ws_supports(args, 8) == expected


def test_ws_tile_only_on_tested_triton_versions():
    from glmcheck.kernels.union_ws_launch import gluon_version_supported
    assert gluon_version_supported("3.6.0") and gluon_version_supported("3.6.1")
    assert not gluon_version_supported("3.9.0") and not gluon_version_supported("3.5.1")
    assert not gluon_version_supported("4.6.0")


def test_ws_available_decides_by_device_capability_and_version(monkeypatch):
    """The whole rule, past the device check (faked: an sm_90 CUDA device, no interpreter)."""
    import triton

    from glmcheck.kernels import union_ws_launch
    monkeypatch.setattr(union_ws_launch, "interpreter_active", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    union_ws_launch.device_capability.cache_clear()
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    assert union_ws_launch.ws_available(cuda)
    monkeypatch.setattr(triton, "__version__", "3.9.0")
    assert not union_ws_launch.ws_available(cuda)
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    union_ws_launch.device_capability.cache_clear()
    assert not union_ws_launch.ws_available(cuda)
    union_ws_launch.device_capability.cache_clear()  # no faked capability left behind
    assert not union_ws_launch.ws_available(torch.device("cpu"))


def test_ws_config_picks_the_tile_by_group_and_rejects_what_the_tiles_cannot_take():
    from glmcheck.kernels.union_ws_launch import WsConfig
    assert [WsConfig().tile_for(group) for group in (1, 2, 4, 8)] == ["pingpong", "split", "split", "pingpong"]
    assert WsConfig(tile="split").tile_for(8) == "split" and WsConfig(tile="pingpong").tile_for(2) == "pingpong"
    assert WsConfig(block_n=32, stages=3).tile_for(8) == "split", "auto took a shape the ping-pong tile lacks"
    WsConfig(block_n=32, stages=3, tile="split")
    with pytest.raises(ValueError, match="tile must be one of"):
        WsConfig(tile="pingpang")
    with pytest.raises(ValueError, match="block_n = 64 and stages = 2, got block_n=32"):
        WsConfig(block_n=32, tile="pingpong")
    with pytest.raises(ValueError, match="stages=3"):
        WsConfig(stages=3, tile="pingpong")


def test_ws_launcher_runs_the_tile_its_config_picks(monkeypatch):
    """launch_union_attention_ws hands each group size to the launcher WsConfig.tile_for names
    (both launchers stubbed: the Gluon kernels need an sm_90 GPU)."""
    from glmcheck.kernels import union_ws_launch
    from glmcheck.kernels.union import UnionSets
    ran: list[str] = []
    monkeypatch.setattr(union_ws_launch, "check_ws_args", lambda *a: None)
    monkeypatch.setattr(union_ws_launch, "launch_pingpong", lambda *a: ran.append("pingpong"))
    monkeypatch.setattr(union_ws_launch, "launch_split", lambda *a: ran.append("split"))
    lengths = torch.zeros(1, dtype=torch.int32)
    for group in (1, 2, 4, 8):
        union_ws_launch.launch_union_attention_ws(None, UnionSets(lengths, lengths, lengths, group), None, 1.0, False)
    union_ws_launch.launch_union_attention_ws(None, UnionSets(lengths, lengths, lengths, 8), None, 1.0, False,
                                              union_ws_launch.WsConfig(tile="split"))
    assert ran == ["pingpong", "split", "split", "pingpong", "split"]


def test_pingpong_launcher_passes_the_config_knobs_to_the_kernel(monkeypatch):
    """launch_pingpong hands consumer_regs to the kernel, traces only when given a buffer, runs the
    kernel itself (DIAG 0) unless asked for a diagnostic form, and runs one program per union
    group (the kernel object stubbed: it needs an sm_90 GPU)."""
    from glmcheck.kernels import union_pingpong
    from glmcheck.kernels.union import UnionSets
    from glmcheck.kernels.union_ws_launch import WsConfig, launch_pingpong
    from glmcheck.kernels.validate import PrefillArgs
    launches: list[tuple[str, tuple, dict]] = []

    class FakeKernel:
        def __init__(self, name: str):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append((self.name, grid, kwargs))

    monkeypatch.setattr(union_pingpong, "sparse_mla_union_pingpong_kernel", FakeKernel("pingpong"))
    q, kv = torch.zeros((8, 8, 576)), torch.zeros((32, 576))
    args = PrefillArgs(q, kv, torch.zeros((8, 4), dtype=torch.int32), None, 0.1, 512)
    sets = UnionSets(torch.zeros((3, 64), dtype=torch.int32), torch.zeros((3, 64), dtype=torch.uint8),
                     torch.zeros(3, dtype=torch.int32), 8)
    out = torch.zeros((24, 8, 512))
    trace = torch.zeros((3, 2, 17, 6), dtype=torch.int64)
    launch_pingpong(args, sets, out, 0.25, False, WsConfig(tile="pingpong"))
    launch_pingpong(args, sets, out, 0.25, False, WsConfig(tile="pingpong", consumer_regs=232), trace)
    launch_pingpong(args, sets, out, 0.25, False, WsConfig(tile="pingpong"), diag=2)
    (name, grid, default), (_, traced_grid, traced), (_, _, diagnostic) = launches
    assert (name, grid, traced_grid) == ("pingpong", (3,), (3,))
    assert [default["CONSUMER_REGS"], traced["CONSUMER_REGS"]] == [224, 232]
    assert (default["TRACE"], default["trace_ptr"]) == (False, None)
    assert traced["TRACE"] is True and traced["trace_ptr"] is trace
    assert default["DIAG"] == 0 and traced["DIAG"] == 0, "a path ran a diagnostic form of the kernel"
    assert diagnostic["DIAG"] == 2


def test_pingpong_launcher_hands_the_kernel_contiguous_rows(monkeypatch):
    """The ping-pong producer takes the row stride as the row width (its first row numbers are
    loaded before the length): launch_pingpong passes contiguous rows as they are and copies a
    strided view (the kernel object stubbed: it needs an sm_90 GPU)."""
    from glmcheck.kernels import union_pingpong
    from glmcheck.kernels.union import UnionSets
    from glmcheck.kernels.union_ws_launch import WsConfig, launch_pingpong
    from glmcheck.kernels.validate import PrefillArgs
    launched: list[tuple] = []

    class FakeKernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: launched.append(args)

    monkeypatch.setattr(union_pingpong, "sparse_mla_union_pingpong_kernel", FakeKernel())
    q, kv = torch.zeros((8, 8, 576)), torch.zeros((32, 576))
    args = PrefillArgs(q, kv, torch.zeros((8, 4), dtype=torch.int32), None, 0.1, 512)
    wide = torch.arange(3 * 80, dtype=torch.int32).view(3, 80)
    contiguous = wide[:, :40].contiguous()
    for rows in (contiguous, wide[:, :40]):
        sets = UnionSets(rows, torch.zeros((3, 40), dtype=torch.uint8), torch.zeros(3, dtype=torch.int32), 8)
        launch_pingpong(args, sets, torch.zeros((24, 8, 512)), 0.25, False, WsConfig(tile="pingpong"))
    (same, copied) = launched
    assert same[2] is contiguous, "contiguous rows were copied"
    assert copied[2].is_contiguous() and torch.equal(copied[2], wide[:, :40])
    assert (same[10], copied[10]) == (40, 40), "stride_rg is not the row width"


def test_gluon_tiles_take_the_shared_positional_arguments():
    """The Gluon tiles' first 16 parameters are what _shared_kernel_args passes, in its order (the
    kernels need an sm_90 GPU, their signatures and the argument tuple do not)."""
    from glmcheck.kernels.union import UnionSets
    from glmcheck.kernels.union_pingpong import sparse_mla_union_pingpong_kernel
    from glmcheck.kernels.union_ws import sparse_mla_union_ws_kernel
    from glmcheck.kernels.union_ws_launch import _shared_kernel_args
    from glmcheck.kernels.validate import PrefillArgs
    names = ["q_ptr", "kv_ptr", "rows_ptr", "bits_ptr", "len_ptr", "out_ptr", "stride_qt", "stride_qh",
             "stride_qd", "stride_kvs", "stride_rg", "stride_bg", "stride_ot", "stride_oh", "stride_od",
             "qk_scale_log2"]
    for kernel in (sparse_mla_union_pingpong_kernel, sparse_mla_union_ws_kernel):
        assert kernel.arg_names[:16] == names
    q, kv = torch.zeros((8, 8, 576)), torch.zeros((32, 576))
    sets = UnionSets(torch.zeros((1, 40), dtype=torch.int32), torch.zeros((1, 48), dtype=torch.uint8),
                     torch.zeros(1, dtype=torch.int32), 8)
    out = torch.zeros((8, 8, 512))
    got = dict(zip(names, _shared_kernel_args(PrefillArgs(q, kv, torch.zeros((8, 4), dtype=torch.int32), None,
                                                          0.1, 512), sets, out, 0.25), strict=True))
    assert got["q_ptr"] is q and got["kv_ptr"] is kv and got["out_ptr"] is out and got["len_ptr"] is sets.lengths
    assert (got["stride_qt"], got["stride_qh"], got["stride_qd"], got["stride_kvs"]) == (8 * 576, 576, 1, 576)
    assert (got["stride_rg"], got["stride_bg"], got["stride_oh"], got["qk_scale_log2"]) == (40, 48, 512, 0.25)


# ---- real shapes on the GPU -------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("heads, G, tokens", [(8, 2, 4096), (8, 4, 4096), (16, 2, 4096), (8, 4, 1023),
                                             (8, 8, 4093), (16, 4, 4096), (32, 2, 4096)])
def test_gpu_union_real_shape(monkeypatch, heads, G, tokens):
    device = torch.device("cuda")
    indices = drifting_indices([tokens], 2048, 0.10, seed=G).to(device)
    q, kv = random_qkv(tokens, heads, tokens, 512, 64, torch.Generator().manual_seed(G), device)
    calls = _spy_union_launches(monkeypatch)
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
    calls = _spy_union_launches(monkeypatch)
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


def ws_device() -> torch.device:
    """The CUDA device, or skip the test where the warp-specialised tiles cannot run (they need an
    sm_90 GPU and Gluon)."""
    from glmcheck.kernels.union_ws_launch import ws_available
    device = torch.device("cuda")
    if not ws_available(device):
        pytest.skip("the warp-specialised tiles need an sm_90 GPU and Gluon")
    return device


@pytest.mark.gpu
@pytest.mark.parametrize("heads, G", [(8, 8), (16, 4), (32, 2)])
def test_gpu_ws_tile_matches_triton_tile(monkeypatch, heads, G):  # ping-pong at G = 8, split at 4 and 2
    """G*H = 64 on an H100/H200 runs the warp-specialised tile: every output written, within the
    reference gate, as close to the Triton tile as two summation orders allow, deterministic.
    Ragged topk_length, -1 and out-of-range slots, a tail of T mod G tokens."""
    device = ws_device()
    tokens, topk = 1027, 512
    indices, kv_rows = overlapping_indices(tokens, topk, seed=heads, kv_rows=3000)
    q, kv = random_qkv(tokens, heads, kv_rows, 512, 64, torch.Generator().manual_seed(heads), device)
    indices = indices.to(device)
    topk_length = torch.randint(0, topk + 1, (tokens,), generator=torch.Generator().manual_seed(1),
                                dtype=torch.int32).to(device)
    kinds: list[str] = []
    _spy_union_launches(monkeypatch, kinds)
    out = poisoned_out(tokens, heads, 512, device)
    sparse_mla_prefill(q, kv, indices, 576 ** -0.5, 512, topk_length=topk_length, out=out, union=G)
    assert kinds == ["ws"]
    assert not out.isnan().any(), "the warp-specialised tile left outputs unwritten"
    ref = sparse_mla_reference(q, kv, indices, 576 ** -0.5, 512, topk_length=topk_length)
    assert_close_to_reference(out, ref)
    monkeypatch.setattr(prefill, "USE_WS_TILE", False)
    triton_tile = sparse_mla_prefill(q, kv, indices, 576 ** -0.5, 512, topk_length=topk_length, union=G)
    assert kinds == ["ws", "triton"]
    assert metrics.rel_l2(out, triton_tile) <= UNION_VS_PER_TOKEN_REL_L2
    monkeypatch.setattr(prefill, "USE_WS_TILE", True)
    again = sparse_mla_prefill(q, kv, indices, 576 ** -0.5, 512, topk_length=topk_length, union=G)
    assert torch.equal(out, again)


@pytest.mark.gpu
@pytest.mark.parametrize("topk", [40, 130])
def test_gpu_pingpong_tile_on_rows_narrower_than_a_pair(topk):
    """The ping-pong producer loads a group's first 128 row numbers before it knows the length,
    masked by the row width: sets whose rows are 40 or 130 wide (less than a pair, or a pair and a
    bit), given as a column slice of wider rows (not contiguous, so the launcher copies them),
    still match the fp32 reference at H = 64 with every output written."""
    from glmcheck.kernels.prefill import LOG2E
    from glmcheck.kernels.union import UnionSets, token_row_sets
    from glmcheck.kernels.union_ws_launch import WsConfig, launch_union_attention_ws
    from glmcheck.kernels.validate import PrefillArgs
    device = ws_device()
    heads, tokens = 64, 300
    indices = drifting_indices([tokens], topk, 0.10, seed=topk).to(device)
    q, kv = random_qkv(tokens, heads, tokens, 512, 64, torch.Generator().manual_seed(topk), device)
    args = PrefillArgs(q, kv, indices, None, 576 ** -0.5, 512)
    sets = token_row_sets(indices, None, tokens)
    padded = torch.full((tokens, topk + 16), -1, dtype=sets.rows.dtype, device=device)
    padded[:, :sets.rows.shape[1]] = sets.rows
    narrow = UnionSets(padded[:, :sets.rows.shape[1]], sets.bits, sets.lengths, 1)
    assert not narrow.rows.is_contiguous()
    out = poisoned_out(tokens, heads, 512, device)
    launch_union_attention_ws(args, narrow, out, LOG2E * args.sm_scale, False, WsConfig(tile="pingpong"))
    assert not out.isnan().any(), "the ping-pong tile left outputs unwritten"
    assert_close_to_reference(out, sparse_mla_reference(q, kv, indices, 576 ** -0.5, 512))


@pytest.mark.gpu
@pytest.mark.parametrize("heads", [8, 64])
def test_gpu_pingpong_tile_matches_split_tile_on_cut_lengths(heads):
    """The ping-pong tile against the split tile on the same sets, whole and cut to 0, 1, 63-65
    and 127-129 rows (empty groups, partial blocks, odd block counts): every output written,
    within the reference gate where whole, within two summation orders of the split tile, and
    empty groups exactly zero. H = 8 runs union 8, H = 64 each token's own rows (G = 1)."""
    from glmcheck.kernels.prefill import LOG2E
    from glmcheck.kernels.union import UnionSets, token_row_sets
    from glmcheck.kernels.union_ws_launch import WsConfig, launch_union_attention_ws
    from glmcheck.kernels.validate import PrefillArgs
    device = ws_device()
    group, topk = 64 // heads, 512
    tokens = 1024 * group // 2 if group > 1 else 1024  # 512 union groups at H = 8, 1 024 tokens at H = 64
    indices = drifting_indices([tokens], topk, 0.10, seed=heads).to(device)
    q, kv = random_qkv(tokens, heads, tokens, 512, 64, torch.Generator().manual_seed(heads), device)
    args = PrefillArgs(q, kv, indices, None, 576 ** -0.5, 512)
    whole = (token_row_sets(indices, None, tokens) if group == 1
             else union_dedup(indices, group, num_kv_rows=tokens))
    cuts = torch.tensor([0, 1, 63, 64, 65, 127, 128, 129], dtype=torch.int32, device=device)
    cut = UnionSets(whole.rows, whole.bits, torch.minimum(whole.lengths, cuts.repeat(whole.lengths.numel() // 8)),
                    group)

    def run(sets: UnionSets, tile: str) -> torch.Tensor:
        out = poisoned_out(tokens, heads, 512, device)
        launch_union_attention_ws(args, sets, out, LOG2E * args.sm_scale, False, WsConfig(tile=tile))
        return out

    pingpong, split = run(whole, "pingpong"), run(whole, "split")
    assert not pingpong.isnan().any(), "the ping-pong tile left outputs unwritten"
    assert_close_to_reference(pingpong, sparse_mla_reference(q, kv, indices, 576 ** -0.5, 512))
    assert metrics.rel_l2(pingpong, split) <= UNION_VS_PER_TOKEN_REL_L2
    short_pingpong, short_split = run(cut, "pingpong"), run(cut, "split")
    assert not short_pingpong.isnan().any()
    assert metrics.rel_l2(short_pingpong, short_split) <= UNION_VS_PER_TOKEN_REL_L2
    empty = (cut.lengths == 0).repeat_interleave(group)
    assert empty.any() and (short_pingpong[empty] == 0).all(), "an empty group is not zero"


def test_pingpong_launcher_runs_one_token_groups_in_64_head_slices(monkeypatch):
    """Per-token (G = 1) at H heads: ceil(H / 64) programs per token, the tile's 64 rows per token,
    PARTIAL_HEADS where H is not a multiple of 64, and H itself passed as num_heads (the kernel
    object stubbed: it needs an sm_90 GPU). Union groups keep one program each."""
    from glmcheck.kernels import union_pingpong
    from glmcheck.kernels.union import UnionSets
    from glmcheck.kernels.union_ws_launch import WsConfig, launch_pingpong
    from glmcheck.kernels.validate import PrefillArgs
    launched: list[tuple] = []

    class FakeKernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: launched.append((grid, args, kwargs))

    monkeypatch.setattr(union_pingpong, "sparse_mla_union_pingpong_kernel", FakeKernel())
    expected = {17: (5, True), 63: (5, True), 64: (5, False), 65: (10, True), 96: (10, True), 128: (10, False)}
    for heads, (programs, partial) in expected.items():
        args = PrefillArgs(torch.zeros((5, heads, 576)), torch.zeros((32, 576)), torch.zeros((5, 4), dtype=torch.int32),
                           None, 0.1, 512)
        sets = UnionSets(torch.zeros((5, 4), dtype=torch.int32), torch.zeros((5, 4), dtype=torch.uint8),
                         torch.zeros(5, dtype=torch.int32), 1)
        launch_pingpong(args, sets, torch.zeros((5, heads, 512)), 0.25, False, WsConfig())
        grid, positional, constants = launched[-1]
        assert grid == (programs,) and positional[16] == heads, heads
        assert (constants["H"], constants["G"], constants["PARTIAL_HEADS"]) == (64, 1, partial)
        assert constants["HEAD_SLICES"] == programs // 5
    args = PrefillArgs(torch.zeros((16, 8, 576)), torch.zeros((32, 576)), torch.zeros((16, 4), dtype=torch.int32),
                       None, 0.1, 512)
    sets = UnionSets(torch.zeros((2, 4), dtype=torch.int32), torch.zeros((2, 4), dtype=torch.uint8),
                     torch.zeros(2, dtype=torch.int32), 8)
    launch_pingpong(args, sets, torch.zeros((16, 8, 512)), 0.25, False, WsConfig())
    grid, positional, constants = launched[-1]
    assert grid == (2,) and (constants["H"], constants["HEAD_SLICES"], constants["PARTIAL_HEADS"]) == (8, 1, False)


def test_ws_tile_takes_any_head_count_per_token_and_refuses_misaligned_q(device):
    """The ping-pong tile takes one-token groups at any 1..128 heads (64-head slices); the split
    tile and union groups still need G*H = 64; q rows must start on 16-byte boundaries (cp.async)."""
    from glmcheck.kernels.union_ws_launch import WsConfig, check_ws_args
    from glmcheck.kernels.validate import PrefillArgs

    def args_for(heads: int, q: torch.Tensor | None = None) -> PrefillArgs:
        q = torch.zeros((4, heads, 576), dtype=torch.bfloat16, device=device) if q is None else q
        return PrefillArgs(q, torch.zeros((32, 576), dtype=torch.bfloat16, device=device),
                           torch.zeros((4, 8), dtype=torch.int32, device=device), None, 0.1, 512)

    for heads in (1, 17, 64, 100, 128):
        check_ws_args(args_for(heads), 1)
    with pytest.raises(ValueError, match="G\\*H = 64"):
        check_ws_args(args_for(32), 1, WsConfig(tile="split"))
    with pytest.raises(ValueError, match="G\\*H = 64"):
        check_ws_args(args_for(32), 4)
    flat = torch.zeros(4 * 64 * 576 + 1, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="q rows must start on 16-byte boundaries"):
        check_ws_args(args_for(64, flat[1:].view(4, 64, 576)), 1)
    wide = torch.zeros((4, 64, 580), dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="q rows must start on 16-byte boundaries"):
        check_ws_args(args_for(64, wide[..., :576]), 1)


@pytest.mark.parametrize("heads, union, tokens, route", [
    (8, 0, 9, ("triton-token", 1, None)), (16, 0, 9, ("triton-token", 1, None)),
    (17, 0, 9, ("gluon-pingpong", 1, None)), (128, 0, 9, ("gluon-pingpong", 1, None)),
    (8, 2, 9, ("triton-union", 2, "triton-token")), (8, 8, 9, ("gluon-pingpong", 8, "triton-token")),
    (16, 4, 8, ("gluon-split", 4, None)), (32, 2, 9, ("gluon-split", 2, "gluon-pingpong")),
    (64, 2, 9, ("gluon-pingpong", 1, None)), (96, 8, 9, ("gluon-pingpong", 1, None))])
def test_route_names_the_tiles_by_head_count_and_group(monkeypatch, heads, union, tokens, route):
    """Where the Gluon tiles run (faked here: they need an sm_90 GPU), the route takes the ping-pong
    tile per 64-head slice from PINGPONG_MIN_HEADS heads on, the Triton per-token kernel below,
    the 64-row Gluon tiles for G*H = 64 and the Triton union tile for smaller union tiles; the
    T mod G tail tokens take the per-token tile of their head count. A given _tile keeps Triton."""
    from glmcheck.kernels import union_ws_launch
    from glmcheck.kernels.prefill import kernel_route
    from glmcheck.kernels.tiles import Tile
    monkeypatch.setattr(union_ws_launch, "ws_available", lambda device: True)
    q, kv = torch.zeros((tokens, heads, 576), dtype=torch.bfloat16), torch.zeros((32, 576), dtype=torch.bfloat16)
    indices = torch.zeros((tokens, 8), dtype=torch.int32)
    got = kernel_route(q, kv, indices, 0.1, 512, union=union)
    assert (got.tile, got.group, got.tail) == route
    forced = kernel_route(q, kv, indices, 0.1, 512, union=union, _tile=Tile(64, 4, 2))
    assert forced.tile.startswith("triton")


@pytest.mark.gpu
@pytest.mark.parametrize("heads", [8, 64, 128])
def test_gpu_pingpong_tile_never_addresses_through_rows_past_the_length(heads):
    """Entries of a union row past its length are unspecified (torch.empty, or a CUDA graph's pool):
    filled here with row numbers far outside the KV pool (2**30 and -2**30), the ping-pong tile
    (union 8 at H = 8, per-token at 64 and at 128 heads, two slices) must still run cleanly and
    match the reference, with the poisoned output fully written."""
    from glmcheck.kernels.prefill import LOG2E
    from glmcheck.kernels.union import UnionSets, token_row_sets
    from glmcheck.kernels.union_ws_launch import WsConfig, launch_union_attention_ws
    from glmcheck.kernels.validate import PrefillArgs
    device = ws_device()
    group, topk, tokens = max(1, 64 // heads), 512, 512
    indices = drifting_indices([tokens], topk, 0.10, seed=heads).to(device)
    indices[:, ::3] = -1  # every set ends well before its row width
    q, kv = random_qkv(tokens, heads, tokens, 512, 64, torch.Generator().manual_seed(heads), device)
    args = PrefillArgs(q, kv, indices, None, 576 ** -0.5, 512)
    sets = token_row_sets(indices, None, tokens) if group == 1 else union_dedup(indices, group, num_kv_rows=tokens)
    past = torch.arange(sets.rows.shape[1], device=device)[None, :] >= sets.lengths[:, None]
    garbage = torch.where(torch.arange(sets.rows.shape[0], device=device)[:, None] % 2 == 0, 2**30, -2**30)
    rows = torch.where(past, garbage.to(torch.int32), sets.rows)
    out = poisoned_out(tokens, heads, 512, device)
    launch_union_attention_ws(args, UnionSets(rows, sets.bits, sets.lengths, group), out, LOG2E * args.sm_scale,
                              False, WsConfig(tile="pingpong"))
    torch.cuda.synchronize()
    assert not out.isnan().any(), "the ping-pong tile left outputs unwritten"
    assert_close_to_reference(out, sparse_mla_reference(q, kv, indices, 576 ** -0.5, 512))
