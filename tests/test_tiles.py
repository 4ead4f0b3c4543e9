"""The tile table, the OutOfResources step-down and its memo."""

from __future__ import annotations

import pytest
import torch
from triton.runtime.errors import OutOfResources

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.data.inputs import poisoned_out, random_inputs
from glmcheck.kernels import prefill, sparse_mla_prefill, tiles
from glmcheck.kernels.tiles import Tile
from tests.support.checks import assert_close_to_reference


def test_step_down_sequence_ends():
    seen, tile = [], Tile(block_n=64, num_warps=4, num_stages=4)
    while tile is not None:
        seen.append(tile)
        tile = tiles.step_down(tile)
    assert seen[1] == Tile(64, 4, 3) and seen[2] == Tile(64, 4, 2)
    assert Tile(16, 4, 2) in seen and seen[-1] == Tile(16, 1, 1)
    assert len(set(seen)) == len(seen)


def test_injected_out_of_resources_steps_down_once_per_shape(device, monkeypatch):
    attempts: list[Tile] = []
    real_launch = prefill.launch_per_token

    def fussy_launch(args, lengths, out, tile, kv_int64, find_bound):
        attempts.append(tile)
        if tile.block_n > 16:
            raise OutOfResources(required=300_000, limit=232_448, name="shared memory")
        return real_launch(args, lengths, out, tile, kv_int64, find_bound)

    monkeypatch.setattr(prefill, "launch_per_token", fussy_launch)
    inp = random_inputs(11, 8, 64, 40, 64, 16, seed=5, device=device)
    start = Tile(block_n=64, num_warps=4, num_stages=3)
    out = poisoned_out(11, 8, 64, device)
    prefill.prefill_forced(inp.q, inp.kv, inp.indices, inp.sm_scale, 64, out=out, tile=start)
    assert attempts == [Tile(64, 4, 3), Tile(64, 4, 2), Tile(32, 4, 2), Tile(16, 4, 2)]
    assert_close_to_reference(out, sparse_mla_reference(inp.q, inp.kv, inp.indices, inp.sm_scale, 64))
    key = tiles.memo_key("per_token", 8, 0, inp.q.device)
    assert tiles.fitted_tile(key) == Tile(16, 4, 2)

    attempts.clear()
    prefill.prefill_forced(inp.q, inp.kv, inp.indices, inp.sm_scale, 64, tile=start)
    assert attempts == [Tile(16, 4, 2)], "the memo must spare the second call its retries"

    attempts.clear()  # another head count is another shape: it retries on its own
    other = random_inputs(3, 16, 64, 40, 64, 16, seed=6, device=device)
    prefill.prefill_forced(other.q, other.kv, other.indices, other.sm_scale, 64, tile=start)
    assert len(attempts) == 4


def test_nothing_fits_raises(device, monkeypatch):
    def never_fits(args, lengths, out, tile, kv_int64, find_bound):
        raise OutOfResources(required=1, limit=0, name="shared memory")

    monkeypatch.setattr(prefill, "launch_per_token", never_fits)
    inp = random_inputs(2, 4, 16, 8, 64, 16, device=device)
    with pytest.raises(OutOfResources):
        sparse_mla_prefill(inp.q, inp.kv, inp.indices, inp.sm_scale, 64)


def test_table_lookup_and_untuned_architecture_warning(monkeypatch, caplog):
    assert tiles.table_tile("per_token", 16, torch.device("cpu")) == tiles.INTERPRETER_TILE
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    h200 = tiles.table_tile("per_token", 16, torch.device("cuda"))
    assert h200 == tiles.TILE_TABLE[(9, 0)][("per_token", 16)]
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(tiles, "_warned_capabilities", set())
    with caplog.at_level("WARNING", logger="glmcheck"):
        assert tiles.table_tile("per_token", 16, torch.device("cuda")) == tiles.DEFAULT_TILE
        assert tiles.table_tile("per_token", 32, torch.device("cuda")) == tiles.DEFAULT_TILE
    warnings = [r for r in caplog.records if "no tuned tile" in r.message]
    assert len(warnings) == 1 and "(7, 5)" in warnings[0].message


@pytest.mark.gpu
def test_gpu_oversized_tile_steps_down():
    inp = random_inputs(256, 8, 1024, 512, 512, 64, seed=9, device="cuda")
    oversized = Tile(block_n=256, num_warps=4, num_stages=6)
    out = poisoned_out(256, 8, 512, "cuda")
    prefill.prefill_forced(inp.q, inp.kv, inp.indices, inp.sm_scale, 512, out=out, tile=oversized)
    fitted = tiles.fitted_tile(tiles.memo_key("per_token", 8, 0, inp.q.device))
    assert fitted is not None and fitted != oversized
    assert_close_to_reference(out, sparse_mla_reference(inp.q, inp.kv, inp.indices, inp.sm_scale, 512))


@pytest.mark.gpu
def test_gpu_uses_bf16_mma_not_the_interpreter_upcast():
    from glmcheck.kernels.runtime import interpreter_active
    from glmcheck.kernels.validate import check_prefill_args

    assert not interpreter_active()
    inp = random_inputs(8, 8, 64, 32, 512, 64, device="cuda")
    args = check_prefill_args(inp.q, inp.kv, inp.indices, inp.sm_scale, 512, None)
    lengths = prefill.effective_lengths(args.indices, None, args.num_kv_rows)
    out = torch.empty((8, 8, 512), dtype=torch.bfloat16, device="cuda")
    compiled = prefill.launch_per_token(args, lengths, out, tiles.table_tile("per_token", 16, args.q.device), False)
    ptx = compiled.asm["ptx"]
    assert "bf16" in ptx and ("mma" in ptx), "expected bf16 tensor-core MMA in the GPU kernel"
    assert ".tf32" not in ptx, "fp32 (upcast) dots would lower to tf32 MMA"
