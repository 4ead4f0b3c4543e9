"""The kernel's whole contract, case by case (tests/contract_matrix.py): head counts 1..128, union
0/2/4/8, small, odd and full topk, both addressing modes, contiguous / strided / 3-d / misaligned
views, topk_length given or not, empty rows and groups. On the GPU the matrix prints which tile
served each case and must run every tile; a KV pool past 2**31 elements runs every path."""

from __future__ import annotations

import os
from collections import Counter

import pytest
import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.data.inputs import poisoned_out
from glmcheck.kernels import sparse_mla_prefill
from glmcheck.kernels.prefill import TILE_NAMES, kernel_route
from tests.support.checks import assert_close_to_reference
from tests.support.contract_matrix import HEADS, LAYOUTS, TOPKS, UNIONS, cpu_cases, describe, matrix_cases, run_case

MATRIX_LOG = "GLMCHECK_MATRIX_LOG"  # where the GPU matrix writes its table, when set
MATRIX_SHARD = "GLMCHECK_MATRIX_SHARD"  # "i/n": run cases i, i + n, ... only (a device call's share)


def shard_cases(cases: list, shard: str | None) -> list:
    """cases[i::n] for shard "i/n" (every case when None); ValueError naming the variable otherwise."""
    if not shard:
        return cases
    try:
        index, count = (int(part) for part in shard.split("/"))
    except ValueError:
        raise ValueError(f"{MATRIX_SHARD} must be i/n (e.g. 0/2), got {shard!r}") from None
    if not 0 <= index < count:
        raise ValueError(f"{MATRIX_SHARD} must be i/n with 0 <= i < n, got {shard!r}")
    return cases[index::count]


def test_matrix_covers_the_contract():
    """Every (heads, union) pair runs with and without topk_length and in both addressing modes;
    every head count and every union G meets every topk and every layout; per-token meets each
    combination of addressing mode and topk_length."""
    cases = matrix_cases()
    for heads in HEADS:
        for union in UNIONS:
            mine = [c for c in cases if (c.heads, c.union) == (heads, union)]
            assert {c.with_length for c in mine} == {False, True}
            assert {c.kv_int64 for c in mine} == {False, True}
        assert {c.topk for c in cases if c.heads == heads} == set(TOPKS)
        assert {c.layout for c in cases if c.heads == heads} == set(LAYOUTS)
    for union in UNIONS:
        assert {c.topk for c in cases if c.union == union} == set(TOPKS)
        assert {c.layout for c in cases if c.union == union} == set(LAYOUTS)
    assert len({(c.kv_int64, c.with_length) for c in cases if c.union == 0}) == 4
    assert len({c.seed for c in cases}) == len(cases)


def test_shards_split_the_matrix_and_each_covers_every_head_count_and_group():
    cases = matrix_cases()
    halves = [shard_cases(cases, f"{i}/2") for i in (0, 1)]
    assert sorted(halves[0] + halves[1], key=cases.index) == cases
    for half in halves:
        assert {(c.heads, c.union) for c in half} == {(h, u) for h in HEADS for u in UNIONS}
    for bad in ("2/2", "x", "1/0"):
        with pytest.raises(ValueError, match=MATRIX_SHARD):
            shard_cases(cases, bad)


@pytest.mark.parametrize("case", cpu_cases(), ids=lambda c: c.label)
def test_contract_case_on_this_device(device, case):
    route = run_case(case, device)
    if device.type == "cpu":
        assert route.tile.startswith("triton") and (route.tail or "triton").startswith("triton")


@pytest.mark.gpu
def test_gpu_contract_matrix():
    """Every case of the matrix; a table of case, tile and verdict is printed (and written, line by
    line, to $GLMCHECK_MATRIX_LOG); every case passes and every tile of TILE_NAMES serves one."""
    device = torch.device("cuda")
    failures, tiles = [], Counter()
    log = open(os.environ[MATRIX_LOG], "w") if os.environ.get(MATRIX_LOG) else None  # noqa: SIM115

    def emit(line: str) -> None:
        print(line)
        if log:
            log.write(line + "\n")
            log.flush()

    emit("| case | tiles | verdict |\n|---|---|---|")
    cases = shard_cases(matrix_cases(), os.environ.get(MATRIX_SHARD))
    for case in cases:
        try:
            route = run_case(case, device)
        except Exception as err:  # noqa: BLE001  (record, go on, fail at the end with all of them)
            failures.append(case.label)
            route = _route_or_none(case)
            emit(f"| {case.label} | {describe(route) if route else '?'} | FAIL: {str(err).splitlines()[0][:160]} |")
            continue
        tiles.update([route.tile] + ([route.tail] if route.tail else []))
        emit(f"| {case.label} | {describe(route)} | pass |")
    emit("\ntile counts: " + ", ".join(f"{name} {tiles[name]}" for name in TILE_NAMES))
    emit(f"{len(cases) - len(failures)} of {len(cases)} cases pass")
    if log:
        log.close()
    assert not failures, f"{len(failures)} cases failed: {failures[:5]}"
    assert all(tiles[name] for name in TILE_NAMES), f"a tile served no case: {dict(tiles)}"


def _route_or_none(case):
    from tests.support.contract_matrix import D_TAIL, D_V, make_case_inputs
    try:
        x = make_case_inputs(case, torch.device("cuda"))
        return kernel_route(x.q, x.kv, x.indices, (D_V + D_TAIL) ** -0.5, D_V, topk_length=x.topk_length,
                            union=case.union)
    except Exception:  # noqa: BLE001
        return None


# (heads, union, the tile the route must name): every tile and slice form on one large pool
LARGE_POOL_PATHS = [(8, 0, "triton-token"), (8, 2, "triton-union"), (16, 4, "gluon-pingpong"), (8, 8, "gluon-pingpong"),
                    (32, 0, "gluon-pingpong"), (64, 0, "gluon-pingpong"), (96, 0, "gluon-pingpong"),
                    (128, 0, "gluon-pingpong")]


@pytest.mark.gpu
def test_gpu_pool_past_int32_offsets_every_path():
    """A KV pool of 3.8 M rows (2.19e9 elements, past 2**31: int64 row offsets chosen by size) with
    every index in its last 4096 rows: each path of LARGE_POOL_PATHS, with and without topk_length,
    matches fp64 on a poisoned output."""
    device = torch.device("cuda")
    num_kv_rows, tokens, topk = 3_800_000, 64, 256
    assert num_kv_rows * 576 > 2**31
    kv = torch.empty((num_kv_rows, 576), dtype=torch.bfloat16, device=device)
    g = torch.Generator(device=device).manual_seed(3)
    kv[-4096:] = torch.randn((4096, 576), generator=g, device=device).to(torch.bfloat16)
    pick = torch.stack([torch.randperm(4096, generator=g, device=device)[:topk] for _ in range(tokens)])
    indices = (num_kv_rows - 4096 + pick).to(torch.int32)
    indices[:, ::9] = -1
    lengths = torch.randint(0, topk + 1, (tokens,), generator=g, device=device, dtype=torch.int32)
    for heads, union, tile in LARGE_POOL_PATHS:
        q = torch.randn((tokens, heads, 576), generator=g, device=device).to(torch.bfloat16)
        for topk_length in (None, lengths):
            route = kernel_route(q, kv, indices, 576 ** -0.5, 512, topk_length=topk_length, union=union)
            assert route.tile == tile, f"H={heads} union {union}: {route}"
            out = poisoned_out(tokens, heads, 512, device)
            sparse_mla_prefill(q, kv, indices, 576 ** -0.5, 512, topk_length=topk_length, out=out, union=union)
            ref = sparse_mla_reference(q, kv, indices, 576 ** -0.5, 512, topk_length=topk_length)
            assert_close_to_reference(out, ref)
