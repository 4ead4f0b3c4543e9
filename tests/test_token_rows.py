"""Per-token path through the 64-row union tile at H = 64 (G = 1): the compacted row sets and the
dispatch. The Gluon tile itself runs only on an sm_90 GPU (the GPU test below); on the CPU the
Triton union tile stands in for it, so the sets and the dispatch are checked end to end."""

from __future__ import annotations

import pytest
import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.data.inputs import poisoned_out, random_qkv
from glmcheck.kernels import prefill, sparse_mla_prefill, tiles
from glmcheck.kernels.union import launch_union_attention, token_row_sets
from tests.support.checks import assert_close_to_reference
from tests.support.inputs import overlapping_indices


@pytest.mark.parametrize("with_length", [False, True])
@pytest.mark.parametrize("topk", [48, 1100])  # 1100: more than one 1024-slot step
def test_token_row_sets_are_each_tokens_valid_rows_in_slot_order(device, with_length, topk):
    indices, kv_rows = overlapping_indices(tokens=13, topk=topk, seed=topk, kv_rows=4 * topk)
    # lengths past topk and below 0 too: the kernel's loop bound clamps them (the contract only masks slots)
    lengths = torch.randint(-2, topk + 6, (13,), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    topk_length = lengths if with_length else None
    sets = token_row_sets(indices.to(device), None if topk_length is None else topk_length.to(device), kv_rows)
    assert sets.group == 1 and sets.lengths.shape == (13,)
    for t in range(13):
        limit = topk if topk_length is None else int(topk_length[t])
        expected = [r for s, r in enumerate(indices[t].tolist()) if s < limit and 0 <= r < kv_rows]
        n = int(sets.lengths[t])
        assert sets.rows[t, :n].tolist() == expected, f"token {t}"
        assert sets.bits[t, :n].tolist() == [1] * n


def test_token_row_sets_of_empty_inputs(device):
    none = token_row_sets(torch.zeros((0, 8), dtype=torch.int32, device=device), None, 10)
    assert none.lengths.numel() == 0
    no_slots = token_row_sets(torch.zeros((3, 0), dtype=torch.int32, device=device), None, 10)
    assert no_slots.lengths.tolist() == [0, 0, 0]


@pytest.mark.parametrize("with_length", [False, True])
def test_h64_per_token_takes_the_64_row_tile(device, monkeypatch, with_length):
    """Where the 64-row Gluon tile applies (faked here), the per-token path at H = 64 hands it the
    token row sets; the Triton union tile stands in for it and must match fp64 and the Triton
    per-token tile, with every output written."""
    calls: list[int] = []

    def stand_in(args, sets, out, scale, kv_int64):
        calls.append(sets.group)
        tile = tiles.table_tile("union", 64, args.q.device)
        return launch_union_attention(args, sets, out, tile, kv_int64, scale)

    monkeypatch.setattr(prefill, "ws_supports", lambda args, group: group * args.num_heads == 64)
    monkeypatch.setattr(prefill, "launch_union_attention_ws", stand_in)
    indices, kv_rows = overlapping_indices(tokens=9, topk=32, seed=4)
    q, kv = random_qkv(9, 64, kv_rows, 64, 16, torch.Generator().manual_seed(4), device)
    topk_length = torch.tensor([32, 0, 5, 17, 32, 1, 31, 12, 30], dtype=torch.int32, device=device) \
        if with_length else None
    indices = indices.to(device)
    scale = 80 ** -0.5
    out = sparse_mla_prefill(q, kv, indices, scale, 64, topk_length=topk_length,
                             out=poisoned_out(9, 64, 64, device))
    assert calls == [1], "the per-token path at H = 64 did not take the 64-row tile"
    assert_close_to_reference(out, sparse_mla_reference(q, kv, indices, scale, 64, topk_length=topk_length))
    triton_tile = prefill.prefill_forced(q, kv, indices, scale, 64, topk_length=topk_length,
                                         tile=tiles.table_tile("per_token", 64, device))  # a given tile keeps Triton
    assert calls == [1]
    assert (out.float() - triton_tile.float()).abs().max() < 2e-2
    small = sparse_mla_prefill(q[:, :8].contiguous(), kv, indices, scale, 64)  # H = 8: the Triton tile
    assert calls == [1] and small.shape == (9, 8, 64)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1024, 1027])
def test_gpu_h64_per_token_on_the_gluon_tile(monkeypatch, tokens):
    """H = 64 on an sm_90 GPU: the Gluon tile, fed each token's own rows, against fp64 and the
    Triton per-token tile; ragged topk_length, -1 and out-of-range slots; poisoned output fully
    written; reruns bitwise equal."""
    from glmcheck.data.indices import drifting_indices
    from glmcheck.kernels.gluon.launch import ws_available

    device = torch.device("cuda")
    if not ws_available(device):
        pytest.skip("needs an sm_90 GPU with the tested triton (Gluon)")
    indices = drifting_indices([tokens], 512, 0.1, seed=3)
    junk = torch.rand(indices.shape, generator=torch.Generator().manual_seed(3)) < 0.05
    indices = torch.where(junk, torch.full_like(indices, -1), indices)
    indices[::7, 100] = tokens + 3
    indices = indices.to(device)
    topk_length = torch.randint(0, 513, (tokens,), generator=torch.Generator().manual_seed(5),
                                dtype=torch.int32).to(device)
    q, kv = random_qkv(tokens, 64, tokens, 512, 64, torch.Generator().manual_seed(3), device)
    scale = 576 ** -0.5
    calls: list[int] = []
    real = prefill.launch_union_attention_ws
    monkeypatch.setattr(prefill, "launch_union_attention_ws",
                        lambda args, sets, *rest: calls.append(sets.group) or real(args, sets, *rest))
    out = sparse_mla_prefill(q, kv, indices, scale, 512, topk_length=topk_length,
                             out=poisoned_out(tokens, 64, 512, device))
    assert calls == [1]
    assert not out.isnan().any(), "an output element was never written"
    assert_close_to_reference(out, sparse_mla_reference(q, kv, indices, scale, 512, topk_length=topk_length))
    assert torch.equal(out, sparse_mla_prefill(q, kv, indices, scale, 512, topk_length=topk_length))
    triton_tile = prefill.prefill_forced(q, kv, indices, scale, 512, topk_length=topk_length,
                                         tile=tiles.table_tile("per_token", 64, device))  # a given tile keeps Triton
    rel = ((out.float() - triton_tile.float()).norm() / triton_tile.float().norm()).item()
    assert rel < 2e-3, f"Gluon vs Triton per-token tile rel-L2 {rel:.2e}"
