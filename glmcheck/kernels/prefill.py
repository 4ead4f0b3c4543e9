"""Launcher of the sparse-MLA prefill kernel: `sparse_mla_prefill`.

Contract (matches FlashMLA's sparse prefill):
    q            [T, H, d_qk] bf16, 1 <= H <= 128
    kv           [S, d_qk] or [S, 1, d_qk] bf16; V is kv[:, :d_v]
    indices      [T, topk] or [T, 1, topk] int32; -1 or any value outside [0, S) is an empty slot
    topk_length  [T] int32 or None; slots at or past topk_length[t] are ignored
    out          [T, H, d_v] bf16 (allocated when None)
    d_qk = d_v + d_tail with d_v a power of two >= 16 and d_tail 0 or a power of two.
Each token attends to its own valid selected rows; a token with none gets exact zeros.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from glmcheck.kernels import tiles
from glmcheck.kernels.gluon.launch import launch_union_attention_ws, ws_supports
from glmcheck.kernels.per_token import sparse_mla_token_kernel
from glmcheck.kernels.plan import PINGPONG_MIN_HEADS, SparseMLAPlan, union_group
from glmcheck.kernels.runtime import interpreter_active, require_kernel_device
from glmcheck.kernels.union import UnionSets, build_union_sets, launch_union_attention, token_row_sets
from glmcheck.kernels.validate import PrefillArgs, check_contents, check_out, check_prefill_args

LOG2E = math.log2(math.e)
MAX_HEAD_TILE = 64
INT32_LIMIT = 2**31
END_BLOCK = 1024  # index slots per step when the per-token kernel finds its own loop bound; one size for every
# top-k (short ones masked): a size per prompt length compiled a variant each (docs/performance.md, "Time to verdict")
# Tiles up to this many rows find their loop bound in the kernel, within topk_length too; the 32-row tile spills
# with it (docs/performance.md, "In-kernel loop bound", "topk_length is free").
KERNEL_BOUND_MAX_ROWS = 16


def head_tile(num_heads: int) -> int:
    """Query rows per program on the per-token path: heads padded to a 16-row MMA tile. Up to MAX_HEAD_TILE heads
    share one program; more heads are split over the grid."""
    return min(max(16, triton.next_power_of_2(num_heads)), MAX_HEAD_TILE)


def needs_int64_rows(num_kv_rows: int, d_qk: int) -> bool:
    """True when KV element offsets can reach 2**31 and row addressing must be int64."""
    return num_kv_rows * d_qk >= INT32_LIMIT


def effective_lengths(indices: torch.Tensor, topk_length: torch.Tensor | None, num_kv_rows: int) -> torch.Tensor:
    """Per-token loop bound [T] int32: topk_length, or the position after the last valid slot."""
    if topk_length is not None:
        return topk_length.contiguous()
    valid = (indices >= 0) & (indices < num_kv_rows)
    positions = torch.arange(1, indices.shape[1] + 1, device=indices.device, dtype=torch.int32)
    return (valid * positions).amax(dim=1).to(torch.int32) if indices.shape[1] else \
        torch.zeros(indices.shape[0], dtype=torch.int32, device=indices.device)


def launch_per_token(args: PrefillArgs, lengths: torch.Tensor | None, out: torch.Tensor,
                     tile: tiles.Tile, kv_int64: bool, find_bound: bool | None = None):
    """Launch the Triton per-token kernel once with `tile` (no step-down); returns Triton's handle. `lengths` [T]
    int32 (topk_length, or the host's `effective_lengths`) bounds each token's slots, None reads all topk slots.
    `find_bound` (default: `lengths is None`) has the kernel find the bound itself within them: one past the last
    slot holding a row in [0, S), as `effective_lengths` would."""
    q, kv, idx = args.q, args.kv, args.indices
    block_h = head_tile(args.num_heads)
    grid = (args.num_tokens, triton.cdiv(args.num_heads, block_h))
    return sparse_mla_token_kernel[grid](
        q, kv, idx, idx if lengths is None else lengths, out, args.num_kv_rows, args.num_heads, args.topk,
        q.stride(0), q.stride(1), q.stride(2), kv.stride(0), kv.stride(1), idx.stride(0), idx.stride(1),
        out.stride(0), out.stride(1), out.stride(2), args.sm_scale * LOG2E,
        D_V=args.d_v, D_TAIL=args.d_tail, TAIL_PAD=max(16, args.d_tail), BLOCK_H=block_h, BLOCK_N=tile.block_n,
        KV_INT64=kv_int64, UPCAST=interpreter_active(),
        HAS_LENGTH=lengths is not None, FIND_BOUND=lengths is None if find_bound is None else find_bound,
        END_BLOCK=END_BLOCK,
        num_warps=tile.num_warps, num_stages=tile.num_stages,
    )


def kernel_finds_bound(args: PrefillArgs) -> bool:
    """True when the Triton per-token kernel finds each token's loop bound itself, within topk_length if given (query
    tiles of at most KERNEL_BOUND_MAX_ROWS rows); larger tiles get topk_length, else the host's `effective_lengths`."""
    return head_tile(args.num_heads) <= KERNEL_BOUND_MAX_ROWS


@dataclass(frozen=True)
class Route:
    """The kernels one `sparse_mla_prefill` call runs: `tile` (one of TILE_NAMES) for the first T - T mod G tokens
    in union groups of `group` tokens (1: the per-token path), `tail` (a per-token tile, or None) for the rest."""

    group: int
    tile: str
    tail: str | None = None


TILE_NAMES = ("triton-token", "triton-union", "gluon-pingpong")  # what a route names


def per_token_tile(args: PrefillArgs, first: tiles.Tile | None = None) -> str:
    """The per-token path's tile: the ping-pong Gluon tile per 64-head slice from PINGPONG_MIN_HEADS heads on
    (where `ws_supports` it), else the Triton per-token kernel."""
    if first is None and args.num_heads >= PINGPONG_MIN_HEADS and ws_supports(args, 1):
        return "gluon-pingpong"
    return "triton-token"


def union_tile(args: PrefillArgs, group: int, first: tiles.Tile | None = None) -> str:
    """The union attention's tile for groups of `group` tokens: the Gluon ping-pong tile where `ws_supports` it,
    else the Triton union kernel."""
    if first is None and ws_supports(args, group):
        return "gluon-pingpong"
    return "triton-union"


def plan_route(args: PrefillArgs, group: int, first: tiles.Tile | None = None) -> Route:
    """The Route for checked arguments and a union group from `union_group` (0: per-token)."""
    if not group:
        return Route(1, per_token_tile(args, first))
    tail_tokens = args.num_tokens % group
    tail = per_token_tile(_token_slice(args, args.num_tokens - tail_tokens)) if tail_tokens else None
    return Route(group, union_tile(args, group, first), tail)


def kernel_route(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int = 512, *,
                 topk_length: torch.Tensor | None = None, union: int = 0, deterministic: bool = False) -> Route:
    """The Route `sparse_mla_prefill` takes for these arguments (it dispatches by the same function), without
    running anything: which tile serves which tokens (tests, diagnostics)."""
    args = check_prefill_args(q, kv, indices, sm_scale, d_v, topk_length)
    return plan_route(args, union_group(args.num_heads, args.num_tokens, union, deterministic))


def _token_slice(args: PrefillArgs, start: int) -> PrefillArgs:
    """The arguments of tokens [start, T)."""
    tail = slice(start, args.num_tokens)
    tail_length = None if args.topk_length is None else args.topk_length[tail]
    return PrefillArgs(args.q[tail], args.kv, args.indices[tail], tail_length, args.sm_scale, args.d_v)


def _run_per_token(args: PrefillArgs, out: torch.Tensor, kv_int64: bool, first: tiles.Tile | None,
                   sets: UnionSets | None = None) -> None:
    if per_token_tile(args, first) == "gluon-pingpong":  # 64-head slices, padded where H % 64 != 0
        sets = sets if sets is not None else token_row_sets(args.indices, args.topk_length, args.num_kv_rows)
        launch_union_attention_ws(args, sets, out, LOG2E * args.sm_scale, kv_int64)
        return
    find_bound = kernel_finds_bound(args)
    lengths = args.topk_length
    if lengths is None and not find_bound:
        lengths = effective_lengths(args.indices, None, args.num_kv_rows)
    elif lengths is not None:
        lengths = lengths.contiguous()
    first = first or tiles.table_tile("per_token", head_tile(args.num_heads), args.q.device)
    key = tiles.memo_key("per_token", args.num_heads, 0, args.q.device)
    tiles.launch_with_step_down(key, first,
                                lambda tile: launch_per_token(args, lengths, out, tile, kv_int64, find_bound))


def _run_union(args: PrefillArgs, group: int, out: torch.Tensor, kv_int64: bool, first: tiles.Tile | None,
               sets: UnionSets | None = None) -> None:
    sets = sets if sets is not None else build_union_sets(args.indices, group, args.topk_length, args.num_kv_rows)
    scale = args.sm_scale * LOG2E
    if union_tile(args, group, first) != "triton-union":
        launch_union_attention_ws(args, sets, out, scale, kv_int64)
    else:
        first = first or tiles.table_tile("union", group * args.num_heads, args.q.device)
        key = tiles.memo_key("union", args.num_heads, group, args.q.device)
        tiles.launch_with_step_down(
            key, first, lambda tile: launch_union_attention(args, sets, out, tile, kv_int64, scale))
    done = sets.lengths.shape[0] * group
    if done < args.num_tokens:  # tail tokens (T mod G) take the per-token path
        _run_per_token(_token_slice(args, done), out[done:], kv_int64, None)


def sparse_mla_prefill(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int = 512, *,
                       topk_length: torch.Tensor | None = None, out: torch.Tensor | None = None, union: int = 0,
                       deterministic: bool = False, check_inputs: bool = False,
                       plan: SparseMLAPlan | None = None) -> torch.Tensor:
    """Sparse-MLA prefill attention over each token's selected KV rows; returns out [T, H, d_v].

    `union` = G in {2, 4, 8} asks for the union fast path (0, the default, the per-token path; any other value is a
    ValueError): G adjacent tokens share one deduplicated gather (the per-token values up to summation order),
    where the G*H query tile is 16, 32 or 64 rows; otherwise (logged once), with
    `deterministic=True` (batch-invariant results) and for the T mod G tail tokens the per-token path runs. No host
    sync, so a CUDA graph can capture any path. On an sm_90 GPU the Gluon tiles run where they apply
    (`kernel_route` names the tiles). `check_inputs=True` also checks contents (a host sync): q and kv finite, no
    KV row named twice in a token's slots. `plan` (from `plan_sparse_mla` on these indices) skips the index work:
    its path and union sets are used, bit for bit the result without it; a plan that does not match the call's shapes,
    device, KV rows or heads, or whose indices or topk_length are not the very tensors it was built from, unchanged
    (`glmcheck.kernels.plan`), is a ValueError; so is an `out` that shares memory with q, kv, indices or topk_length (or
    with itself).
    """
    return prefill_forced(q, kv, indices, sm_scale, d_v, topk_length=topk_length, out=out, union=union,
                          deterministic=deterministic, check_inputs=check_inputs, plan=plan)


def prefill_forced(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int = 512, *,
                   topk_length: torch.Tensor | None = None, out: torch.Tensor | None = None, union: int = 0,
                   deterministic: bool = False, check_inputs: bool = False, plan: SparseMLAPlan | None = None,
                   kv_int64: bool | None = None, tile: tiles.Tile | None = None) -> torch.Tensor:
    """`sparse_mla_prefill` with what it chooses itself forced, the testing entry point: `kv_int64` True / False
    forces int64 / int32 KV row offsets (None: int64 where offsets reach 2**31); `tile` replaces the tuned first
    tile and keeps the Triton kernels (no Gluon tile). Same inputs, same bits."""
    args = check_prefill_args(q, kv, indices, sm_scale, d_v, topk_length)
    if check_inputs:
        check_contents(args)
    if plan is not None:
        if not isinstance(plan, SparseMLAPlan):
            raise TypeError(f"plan must be a SparseMLAPlan from plan_sparse_mla, got {type(plan).__name__}")
        plan.check_matches(args, union, deterministic, topk_length)
    group = plan.group if plan is not None else union_group(args.num_heads, args.num_tokens, union, deterministic)
    require_kernel_device(args.q, "q")
    if out is None:
        out = torch.empty((args.num_tokens, args.num_heads, d_v), dtype=torch.bfloat16, device=args.q.device)
    else:
        out = check_out(out, args)
    if args.num_tokens == 0:
        return out
    kv_int64 = needs_int64_rows(args.num_kv_rows, args.d_qk) if kv_int64 is None else kv_int64
    if group:
        _run_union(args, group, out, kv_int64, tile, plan.union_sets if plan is not None else None)
    else:
        _run_per_token(args, out, kv_int64, tile, plan.token_sets if plan is not None else None)
    return out
