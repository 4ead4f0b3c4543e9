"""The ping-pong tile's half pairs (Hopper only): a union group with an odd block count ends on a pair
that holds only its even block, and gives the same bits as the full pair over an all-masked odd
block (docs/performance.md, "Half pairs"). The protocol of the half pair is checked on the CPU by
tests/test_pingpong_protocol.py."""

from __future__ import annotations

import pytest
import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.data.indices import drifting_indices
from glmcheck.data.inputs import poisoned_out, random_qkv
from glmcheck.kernels import union_dedup
from tests.support.checks import assert_close_to_reference

# Union lengths whose block count (64 rows a block) is odd: one block, three, five; a full first
# block, a one-row last block, a last block one row short of full.
ODD_BLOCK_LENGTHS = (1, 64, 129, 150, 191, 257, 320)


def _cut_and_padded(sets, cuts: torch.Tensor):
    """(the sets cut to `cuts` rows per group, or fewer to keep the block count odd; the same sets
    with 64 more rows per group that no token owns: row 0 with ownership bits 0), so that every cut
    group's half pair becomes a full pair whose odd block is all masked."""
    from glmcheck.kernels.union import UnionSets
    groups, width = sets.rows.shape
    lengths = torch.minimum(sets.lengths, cuts)
    blocks = (lengths + 63) // 64
    lengths = torch.where(blocks % 2 == 0, (blocks - 1).clamp(min=0) * 64, lengths)  # a short set: its odd part
    keep = torch.arange(width, device=cuts.device)[None, :] < lengths[:, None]
    rows = torch.where(keep, sets.rows, 0)
    bits = torch.where(keep, sets.bits, 0)
    padded_rows = torch.cat([rows, torch.zeros((groups, 64), dtype=rows.dtype, device=rows.device)], dim=1)
    padded_bits = torch.cat([bits, torch.zeros((groups, 64), dtype=bits.dtype, device=bits.device)], dim=1)
    return (UnionSets(rows, bits, lengths, sets.group),
            UnionSets(padded_rows, padded_bits, lengths + 64, sets.group))


@pytest.mark.gpu
def test_gpu_half_pair_equals_the_full_pair_over_a_masked_block():
    """Union 8 at H = 8 on the ping-pong tile: groups cut to odd block counts (a half pair last) give
    bit for bit the output of the same groups padded with a block that no token owns (a full pair),
    every output written and within the reference gate; groups cut to nothing are zero."""
    from glmcheck.kernels.gluon.launch import launch_union_attention_ws
    from glmcheck.kernels.prefill import LOG2E
    from glmcheck.kernels.validate import PrefillArgs
    from tests.test_gluon import ws_device
    device = ws_device()
    heads, group, topk = 8, 8, 512
    tokens = 8 * 256
    indices = drifting_indices([tokens], topk, 0.10, seed=3).to(device)
    q, kv = random_qkv(tokens, heads, tokens, 512, 64, torch.Generator().manual_seed(3), device)
    args = PrefillArgs(q, kv, indices, None, 576 ** -0.5, 512)
    sets = union_dedup(indices, group, num_kv_rows=tokens)
    lengths = torch.tensor((0,) + ODD_BLOCK_LENGTHS, dtype=torch.int32, device=device)
    cuts = lengths.repeat(-(-sets.lengths.numel() // lengths.numel()))[:sets.lengths.numel()]
    half, full = _cut_and_padded(sets, cuts)
    blocks = (half.lengths + 63) // 64
    assert ((blocks % 2 == 1) | (half.lengths == 0)).all() and (half.lengths > 0).sum() > 200

    def run(union_sets) -> torch.Tensor:
        out = poisoned_out(tokens, heads, 512, device)
        launch_union_attention_ws(args, union_sets, out, LOG2E * args.sm_scale, False)
        return out

    got, expected = run(half), run(full)
    assert not got.isnan().any(), "the half pairs left outputs unwritten"
    assert torch.equal(got, expected), "a half pair differs from the full pair over a masked block"
    empty = (half.lengths == 0).repeat_interleave(group)
    assert (got[empty] == 0).all(), "an empty group is not zero"
    # the cut groups' own selections, as the reference sees them: each token's rows among its group's kept rows
    kept = torch.zeros((tokens, tokens), dtype=torch.bool, device=device)
    for g, n in enumerate(half.lengths.tolist()):
        rows, bits = half.rows[g, :n].long(), half.bits[g, :n].to(torch.int32)
        for member in range(group):
            kept[g * group + member, rows[(bits >> member) & 1 == 1]] = True
    selected = torch.where(kept, torch.arange(tokens, device=device, dtype=torch.int32)[None, :], -1)
    assert_close_to_reference(got, sparse_mla_reference(q, kv, selected, 576 ** -0.5, 512))
