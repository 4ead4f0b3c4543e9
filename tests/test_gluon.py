"""The warp-specialised Gluon tiles (Hopper only): their launcher's rules on the CPU (kernel objects
stubbed), and on an sm_90 GPU the tiles against fp64, the Triton tile and each other."""

from __future__ import annotations

import pytest
import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.checks import metrics
from glmcheck.data.indices import drifting_indices
from glmcheck.data.inputs import poisoned_out, random_qkv
from glmcheck.kernels import prefill, sparse_mla_prefill, tiles, union_dedup
from tests.support.checks import assert_close_to_reference
from tests.support.inputs import UNION_VS_PER_TOKEN_REL_L2, overlapping_indices, set_indices, spy_union_launches


def test_ws_tile_refuses_what_it_cannot_run(device):
    from glmcheck.kernels.gluon.launch import check_ws_args, ws_supports
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

    from glmcheck.kernels.gluon.launch import gluon_version_supported
    expected = device.type == "cuda" and torch.cuda.get_device_capability() == (9, 0) \
        and gluon_version_supported(triton.__version__)
    assert ws_supports(args, 8) == expected


def test_ws_tile_only_on_tested_triton_versions():
    from glmcheck.kernels.gluon.launch import gluon_version_supported
    assert gluon_version_supported("3.6.0") and gluon_version_supported("3.6.1")
    assert not gluon_version_supported("3.9.0") and not gluon_version_supported("3.5.1")
    assert not gluon_version_supported("4.6.0")


def test_ws_available_decides_by_device_capability_and_version(monkeypatch):
    """The whole rule, past the device check (faked: an sm_90 CUDA device, no interpreter)."""
    import triton

    from glmcheck.kernels.gluon import launch
    monkeypatch.setattr(launch, "interpreter_active", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    launch.device_capability.cache_clear()
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    assert launch.ws_available(cuda)
    monkeypatch.setattr(triton, "__version__", "3.9.0")
    assert not launch.ws_available(cuda)
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    launch.device_capability.cache_clear()
    assert not launch.ws_available(cuda)
    launch.device_capability.cache_clear()  # no faked capability left behind
    assert not launch.ws_available(torch.device("cpu"))


def test_ws_launcher_checks_then_runs_the_pingpong_tile_for_every_group(monkeypatch):
    """launch_union_attention_ws checks its arguments, then hands every group size (1, 2, 4, 8) to the
    ping-pong launcher (stubbed: the Gluon kernel needs an sm_90 GPU)."""
    from glmcheck.kernels.gluon import launch
    from glmcheck.kernels.union import UnionSets
    ran: list[str] = []
    monkeypatch.setattr(launch, "check_ws_args", lambda args, group: ran.append(f"check {group}"))
    monkeypatch.setattr(launch, "launch_pingpong", lambda args, sets, *rest: ran.append(f"pingpong {sets.group}"))
    lengths = torch.zeros(1, dtype=torch.int32)
    for group in (1, 2, 4, 8):
        launch.launch_union_attention_ws(None, UnionSets(lengths, lengths, lengths, group), None, 1.0, False)
    assert ran == [f"{step} {group}" for group in (1, 2, 4, 8) for step in ("check", "pingpong")]


def test_pingpong_launcher_passes_the_launch_constants_to_the_kernel(monkeypatch):
    """launch_pingpong runs one program per union group with the measured consumer registers and
    the tile's BLOCK_N (the kernel object stubbed: it needs an sm_90 GPU)."""
    from glmcheck.kernels.gluon import pingpong
    from glmcheck.kernels.gluon.constants import BLOCK_N, PINGPONG_CONSUMER_REGS
    from glmcheck.kernels.gluon.launch import launch_pingpong
    from glmcheck.kernels.union import UnionSets
    from glmcheck.kernels.validate import PrefillArgs
    launches: list[tuple[tuple, dict]] = []

    class FakeKernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append((grid, kwargs))

    monkeypatch.setattr(pingpong, "sparse_mla_union_pingpong_kernel", FakeKernel())
    q, kv = torch.zeros((8, 8, 576)), torch.zeros((32, 576))
    args = PrefillArgs(q, kv, torch.zeros((8, 4), dtype=torch.int32), None, 0.1, 512)
    sets = UnionSets(torch.zeros((3, 64), dtype=torch.int32), torch.zeros((3, 64), dtype=torch.uint8),
                     torch.zeros(3, dtype=torch.int32), 8)
    launch_pingpong(args, sets, torch.zeros((24, 8, 512)), 0.25, True)
    (grid, constants), = launches
    assert grid == (3,) and (PINGPONG_CONSUMER_REGS, BLOCK_N) == (224, 64)
    assert (constants["CONSUMER_REGS"], constants["BLOCK_N"], constants["KV_INT64"]) == (224, 64, True)


def test_pingpong_launcher_hands_the_kernel_contiguous_rows(monkeypatch):
    """The ping-pong producer takes the row stride as the row width (its first row numbers are
    loaded before the length): launch_pingpong passes contiguous rows as they are and copies a
    strided view (the kernel object stubbed: it needs an sm_90 GPU)."""
    from glmcheck.kernels.gluon import pingpong
    from glmcheck.kernels.gluon.launch import launch_pingpong
    from glmcheck.kernels.union import UnionSets
    from glmcheck.kernels.validate import PrefillArgs
    launched: list[tuple] = []

    class FakeKernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: launched.append(args)

    monkeypatch.setattr(pingpong, "sparse_mla_union_pingpong_kernel", FakeKernel())
    q, kv = torch.zeros((8, 8, 576)), torch.zeros((32, 576))
    args = PrefillArgs(q, kv, torch.zeros((8, 4), dtype=torch.int32), None, 0.1, 512)
    wide = torch.arange(3 * 80, dtype=torch.int32).view(3, 80)
    contiguous = wide[:, :40].contiguous()
    for rows in (contiguous, wide[:, :40]):
        sets = UnionSets(rows, torch.zeros((3, 40), dtype=torch.uint8), torch.zeros(3, dtype=torch.int32), 8)
        launch_pingpong(args, sets, torch.zeros((24, 8, 512)), 0.25, False)
    (same, copied) = launched
    assert same[2] is contiguous, "contiguous rows were copied"
    assert copied[2].is_contiguous() and torch.equal(copied[2], wide[:, :40])
    assert (same[10], copied[10]) == (40, 40), "stride_rg is not the row width"


def test_gluon_tile_takes_the_shared_positional_arguments():
    """The Gluon tile's first 16 parameters are what _shared_kernel_args passes, in its order (the
    kernel needs an sm_90 GPU, its signature and the argument tuple do not)."""
    from glmcheck.kernels.gluon.launch import _shared_kernel_args
    from glmcheck.kernels.gluon.pingpong import sparse_mla_union_pingpong_kernel
    from glmcheck.kernels.union import UnionSets
    from glmcheck.kernels.validate import PrefillArgs
    names = ["q_ptr", "kv_ptr", "rows_ptr", "bits_ptr", "len_ptr", "out_ptr", "stride_qt", "stride_qh",
             "stride_qd", "stride_kvs", "stride_rg", "stride_bg", "stride_ot", "stride_oh", "stride_od",
             "qk_scale_log2"]
    assert sparse_mla_union_pingpong_kernel.arg_names[:16] == names
    q, kv = torch.zeros((8, 8, 576)), torch.zeros((32, 576))
    sets = UnionSets(torch.zeros((1, 40), dtype=torch.int32), torch.zeros((1, 48), dtype=torch.uint8),
                     torch.zeros(1, dtype=torch.int32), 8)
    out = torch.zeros((8, 8, 512))
    got = dict(zip(names, _shared_kernel_args(PrefillArgs(q, kv, torch.zeros((8, 4), dtype=torch.int32), None,
                                                          0.1, 512), sets, out, 0.25), strict=True))
    assert got["q_ptr"] is q and got["kv_ptr"] is kv and got["out_ptr"] is out and got["len_ptr"] is sets.lengths
    assert (got["stride_qt"], got["stride_qh"], got["stride_qd"], got["stride_kvs"]) == (8 * 576, 576, 1, 576)
    assert (got["stride_rg"], got["stride_bg"], got["stride_oh"], got["qk_scale_log2"]) == (40, 48, 512, 0.25)


def ws_device() -> torch.device:
    """The CUDA device, or skip the test where the warp-specialised tiles cannot run (they need an
    sm_90 GPU and Gluon)."""
    from glmcheck.kernels.gluon.launch import ws_available
    device = torch.device("cuda")
    if not ws_available(device):
        pytest.skip("the warp-specialised tiles need an sm_90 GPU and Gluon")
    return device


@pytest.mark.gpu
@pytest.mark.parametrize("heads, G", [(8, 8), (16, 4), (32, 2)])
def test_gpu_ws_tile_matches_triton_tile(monkeypatch, heads, G):  # the ping-pong tile at every G
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
    spy_union_launches(monkeypatch, kinds)
    out = poisoned_out(tokens, heads, 512, device)
    sparse_mla_prefill(q, kv, indices, 576 ** -0.5, 512, topk_length=topk_length, out=out, union=G)
    assert kinds == ["ws"]
    assert not out.isnan().any(), "the warp-specialised tile left outputs unwritten"
    ref = sparse_mla_reference(q, kv, indices, 576 ** -0.5, 512, topk_length=topk_length)
    assert_close_to_reference(out, ref)
    triton_tile = prefill.prefill_forced(q, kv, indices, 576 ** -0.5, 512, topk_length=topk_length, union=G,
                                         tile=tiles.table_tile("union", 64, device))  # a given tile keeps Triton
    assert kinds == ["ws", "triton"]
    assert metrics.rel_l2(out, triton_tile) <= UNION_VS_PER_TOKEN_REL_L2
    again = sparse_mla_prefill(q, kv, indices, 576 ** -0.5, 512, topk_length=topk_length, union=G)
    assert torch.equal(out, again)


@pytest.mark.gpu
@pytest.mark.parametrize("topk", [40, 130])
def test_gpu_pingpong_tile_on_rows_narrower_than_a_pair(topk):
    """The ping-pong producer loads a group's first 128 row numbers before it knows the length,
    masked by the row width: sets whose rows are 40 or 130 wide (less than a pair, or a pair and a
    bit), given as a column slice of wider rows (not contiguous, so the launcher copies them),
    still match the fp32 reference at H = 64 with every output written."""
    from glmcheck.kernels.gluon.launch import launch_union_attention_ws
    from glmcheck.kernels.prefill import LOG2E
    from glmcheck.kernels.union import UnionSets, token_row_sets
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
    launch_union_attention_ws(args, narrow, out, LOG2E * args.sm_scale, False)
    assert not out.isnan().any(), "the ping-pong tile left outputs unwritten"
    assert_close_to_reference(out, sparse_mla_reference(q, kv, indices, 576 ** -0.5, 512))


@pytest.mark.gpu
@pytest.mark.parametrize("heads", [8, 64])
def test_gpu_pingpong_tile_on_cut_lengths(heads):
    """The ping-pong tile on sets whole and cut to 0, 1, 63-65 and 127-129 rows (empty groups, partial
    blocks, odd block counts): every output written, within the reference gate of the selection the
    sets hold (`set_indices`; whole, the indices' own), and empty groups exactly zero. H = 8 runs
    union 8, H = 64 each token's own rows (G = 1)."""
    from glmcheck.kernels.gluon.launch import launch_union_attention_ws
    from glmcheck.kernels.prefill import LOG2E
    from glmcheck.kernels.union import UnionSets, token_row_sets
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

    def run(sets: UnionSets) -> torch.Tensor:
        out = poisoned_out(tokens, heads, 512, device)
        launch_union_attention_ws(args, sets, out, LOG2E * args.sm_scale, False)
        return out

    pingpong = run(whole)
    assert not pingpong.isnan().any(), "the ping-pong tile left outputs unwritten"
    assert_close_to_reference(pingpong, sparse_mla_reference(q, kv, indices, 576 ** -0.5, 512))
    short = run(cut)
    assert not short.isnan().any(), "the ping-pong tile left outputs of cut sets unwritten"
    empty = (cut.lengths == 0).repeat_interleave(group)
    assert empty.any() and (short[empty] == 0).all(), "an empty group is not zero"
    assert_close_to_reference(short[~empty], sparse_mla_reference(q, kv, set_indices(cut, tokens), 576 ** -0.5,
                                                                  512)[~empty])


def test_pingpong_launcher_runs_one_token_groups_in_64_head_slices(monkeypatch):
    """Per-token (G = 1) at H heads: ceil(H / 64) programs per token, the tile's 64 rows per token,
    PARTIAL_HEADS where H is not a multiple of 64, and H itself passed as num_heads (the kernel
    object stubbed: it needs an sm_90 GPU). Union groups keep one program each."""
    from glmcheck.kernels.gluon import pingpong
    from glmcheck.kernels.gluon.launch import launch_pingpong
    from glmcheck.kernels.union import UnionSets
    from glmcheck.kernels.validate import PrefillArgs
    launched: list[tuple] = []

    class FakeKernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: launched.append((grid, args, kwargs))

    monkeypatch.setattr(pingpong, "sparse_mla_union_pingpong_kernel", FakeKernel())
    expected = {17: (5, True), 63: (5, True), 64: (5, False), 65: (10, True), 96: (10, True), 128: (10, False)}
    for heads, (programs, partial) in expected.items():
        args = PrefillArgs(torch.zeros((5, heads, 576)), torch.zeros((32, 576)), torch.zeros((5, 4), dtype=torch.int32),
                           None, 0.1, 512)
        sets = UnionSets(torch.zeros((5, 4), dtype=torch.int32), torch.zeros((5, 4), dtype=torch.uint8),
                         torch.zeros(5, dtype=torch.int32), 1)
        launch_pingpong(args, sets, torch.zeros((5, heads, 512)), 0.25, False)
        grid, positional, constants = launched[-1]
        assert grid == (programs,) and positional[16] == heads, heads
        assert (constants["H"], constants["G"], constants["PARTIAL_HEADS"]) == (64, 1, partial)
        assert constants["HEAD_SLICES"] == programs // 5
    args = PrefillArgs(torch.zeros((16, 8, 576)), torch.zeros((32, 576)), torch.zeros((16, 4), dtype=torch.int32),
                       None, 0.1, 512)
    sets = UnionSets(torch.zeros((2, 4), dtype=torch.int32), torch.zeros((2, 4), dtype=torch.uint8),
                     torch.zeros(2, dtype=torch.int32), 8)
    launch_pingpong(args, sets, torch.zeros((16, 8, 512)), 0.25, False)
    grid, positional, constants = launched[-1]
    assert grid == (2,) and (constants["H"], constants["HEAD_SLICES"], constants["PARTIAL_HEADS"]) == (8, 1, False)


def test_ws_tile_takes_any_head_count_per_token_and_refuses_misaligned_q(device):
    """The ping-pong tile takes one-token groups at any 1..128 heads (64-head slices); union groups
    need G*H = 64; q rows must start on 16-byte boundaries (cp.async)."""
    from glmcheck.kernels.gluon.launch import check_ws_args
    from glmcheck.kernels.validate import PrefillArgs

    def args_for(heads: int, q: torch.Tensor | None = None) -> PrefillArgs:
        q = torch.zeros((4, heads, 576), dtype=torch.bfloat16, device=device) if q is None else q
        return PrefillArgs(q, torch.zeros((32, 576), dtype=torch.bfloat16, device=device),
                           torch.zeros((4, 8), dtype=torch.int32, device=device), None, 0.1, 512)

    for heads in (1, 17, 64, 100, 128):
        check_ws_args(args_for(heads), 1)
    with pytest.raises(ValueError, match="G\\*H = 64"):
        check_ws_args(args_for(32), 4)
    flat = torch.zeros(4 * 64 * 576 + 1, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="q rows must start on 16-byte boundaries"):
        check_ws_args(args_for(64, flat[1:].view(4, 64, 576)), 1)
    wide = torch.zeros((4, 64, 580), dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="q rows must start on 16-byte boundaries"):
        check_ws_args(args_for(64, wide[..., :576]), 1)


@pytest.mark.gpu
@pytest.mark.parametrize("heads", [8, 64, 128])
def test_gpu_pingpong_tile_never_addresses_through_rows_past_the_length(heads):
    """Entries of a union row past its length are unspecified (torch.empty, or a CUDA graph's pool):
    filled here with row numbers far outside the KV pool (2**30 and -2**30), the ping-pong tile
    (union 8 at H = 8, per-token at 64 and at 128 heads, two slices) must still run cleanly and
    match the reference, with the poisoned output fully written."""
    from glmcheck.kernels.gluon.launch import launch_union_attention_ws
    from glmcheck.kernels.prefill import LOG2E
    from glmcheck.kernels.union import UnionSets, token_row_sets
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
                              False)
    torch.cuda.synchronize()
    assert not out.isnan().any(), "the ping-pong tile left outputs unwritten"
    assert_close_to_reference(out, sparse_mla_reference(q, kv, indices, 576 ** -0.5, 512))
