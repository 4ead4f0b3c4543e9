"""The public op's dispatch: which tiles `kernel_route` names (and `sparse_mla_prefill` runs) by
head count, union group and device."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("heads, union, tokens, route", [
    (8, 0, 9, ("triton-token", 1, None)), (16, 0, 9, ("triton-token", 1, None)),
    (17, 0, 9, ("gluon-pingpong", 1, None)), (128, 0, 9, ("gluon-pingpong", 1, None)),
    (8, 2, 9, ("triton-union", 2, "triton-token")), (8, 8, 9, ("gluon-pingpong", 8, "triton-token")),
    (16, 4, 8, ("gluon-pingpong", 4, None)), (32, 2, 9, ("gluon-pingpong", 2, "gluon-pingpong")),
    (64, 2, 9, ("gluon-pingpong", 1, None)), (96, 8, 9, ("gluon-pingpong", 1, None))])
def test_route_names_the_tiles_by_head_count_and_group(monkeypatch, heads, union, tokens, route):
    """Where the Gluon tiles run (faked here: they need an sm_90 GPU), the route takes the ping-pong
    tile per 64-head slice from PINGPONG_MIN_HEADS heads on, the Triton per-token kernel below,
    the 64-row Gluon tiles for G*H = 64 and the Triton union tile for smaller union tiles; the
    T mod G tail tokens take the per-token tile of their head count. A given tile keeps Triton."""
    from glmcheck.kernels.gluon import launch
    from glmcheck.kernels.plan import union_group
    from glmcheck.kernels.prefill import kernel_route, plan_route
    from glmcheck.kernels.tiles import Tile
    from glmcheck.kernels.validate import check_prefill_args
    monkeypatch.setattr(launch, "ws_available", lambda device: True)
    q, kv = torch.zeros((tokens, heads, 576), dtype=torch.bfloat16), torch.zeros((32, 576), dtype=torch.bfloat16)
    indices = torch.zeros((tokens, 8), dtype=torch.int32)
    got = kernel_route(q, kv, indices, 0.1, 512, union=union)
    assert (got.tile, got.group, got.tail) == route
    args = check_prefill_args(q, kv, indices, 0.1, 512, None)
    forced = plan_route(args, union_group(heads, tokens, union, False), Tile(64, 4, 2))
    assert forced.tile.startswith("triton")
