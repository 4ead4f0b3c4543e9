"""Launcher of the sparse-MLA prefill over the FP8 KV pool: `sparse_mla_prefill_fp8`.

Contract: `sparse_mla_prefill`'s per-token path with kv replaced by the pool engines store
(`glmcheck.kernels.fp8`):
    q            [T, H, d_qk] bf16, 1 <= H <= 128
    pool         [pages, page_rows, 1, bytes] uint8, bytes = pool_bytes(d_qk, d_qk - d_v): d_v e4m3 latent values
                 (key and value), their fp32 scales, d_qk - d_v bf16 rope values (key only)
    num_rows     S, the pool rows that exist (0 <= S <= pages * page_rows); rows at or past S are never read
    indices      [T, topk] or [T, 1, topk] int32; -1 or any value outside [0, S) is an empty slot
    topk_length  [T] int32 or None; slots at or past topk_length[t] are ignored
    out          [T, H, d_v] bf16 (allocated when None)
The result is the per-token kernel's over `dequantize_kv_pool(pool, S)`: the same bf16 values enter the same MMAs.
"""

from __future__ import annotations

import torch
import triton

from glmcheck.kernels import tiles
from glmcheck.kernels.fp8 import TILE, check_pool
from glmcheck.kernels.fp8_dequant import native_e4m3
from glmcheck.kernels.per_token_fp8 import sparse_mla_fp8_token_kernel
from glmcheck.kernels.prefill import (
    END_BLOCK,
    INT32_LIMIT,
    LOG2E,
    effective_lengths,
    head_tile,
    kernel_finds_bound,
)
from glmcheck.kernels.runtime import interpreter_active, require_kernel_device
from glmcheck.kernels.validate import PrefillArgs, check_out, check_prefill_args


def check_fp8_prefill_args(q: object, pool: object, num_rows: object, indices: object, sm_scale: object,
                           d_v: object, topk_length: object) -> PrefillArgs:
    """Check the contract above; returns the normalised arguments with a zero-stride [num_rows, d_qk] bf16 view
    standing in for kv (never read: it carries S, d_qk and q's device, so `sparse_mla_prefill`'s checks of q,
    indices, topk_length, sm_scale and d_v, and later of out, apply unchanged), then checks the pool and num_rows.
    Errors name the argument."""
    d_qk = q.shape[-1] if isinstance(q, torch.Tensor) and q.dim() else 0
    device = q.device if isinstance(q, torch.Tensor) else torch.device("cpu")
    rows = num_rows if isinstance(num_rows, int) and not isinstance(num_rows, bool) and num_rows >= 0 else 0
    stand_in = torch.empty((), dtype=torch.bfloat16, device=device).expand(rows, d_qk)
    args = check_prefill_args(q, stand_in, indices, sm_scale, d_v, topk_length)
    if isinstance(pool, torch.Tensor) and pool.device != args.q.device:
        raise ValueError(f"pool must be on {args.q.device} (the device of q), got {pool.device}")
    latent, _ = check_pool(pool, num_rows, args.d_tail)
    if latent != args.d_v:
        raise ValueError(f"pool rows of {pool.shape[-1]} bytes hold {latent} latent values beside {args.d_tail} "
                         f"rope values (d_qk - d_v), not d_v = {args.d_v}")
    return args


def launch_per_token_fp8(args: PrefillArgs, pool: torch.Tensor, lengths: torch.Tensor | None, out: torch.Tensor,
                         tile: tiles.Tile, row_int64: bool, find_bound: bool):
    """Launch the FP8 per-token kernel once with `tile`; `lengths` and `find_bound` as `launch_per_token`'s."""
    q, idx = args.q, args.indices
    block_h = head_tile(args.num_heads)
    grid = (args.num_tokens, triton.cdiv(args.num_heads, block_h))
    return sparse_mla_fp8_token_kernel[grid](
        q, pool, idx, idx if lengths is None else lengths, out, args.num_kv_rows, args.num_heads, args.topk,
        q.stride(0), q.stride(1), q.stride(2), pool.stride(0), pool.stride(1), pool.stride(3),
        idx.stride(0), idx.stride(1), out.stride(0), out.stride(1), out.stride(2), args.sm_scale * LOG2E,
        PAGE_ROWS=pool.shape[1], D_V=args.d_v, D_TAIL=args.d_tail, TAIL_PAD=max(16, args.d_tail),
        TILE_W=min(args.d_v, TILE), BLOCK_H=block_h, BLOCK_N=tile.block_n, ROW_INT64=row_int64,
        UPCAST=interpreter_active(), NATIVE_DECODE=native_e4m3(q.device), HAS_LENGTH=lengths is not None,
        FIND_BOUND=find_bound, END_BLOCK=END_BLOCK, num_warps=tile.num_warps, num_stages=tile.num_stages,
    )


# The first tile on a GPU, from sm_90 compiles (docs/evidence/cpu-runs/2026-12-04-fp8-kernel-ptx.txt; not yet
# timed): at 16 query rows (H <= 16) this kernel takes 187 registers and no spills with it, and spills 248 bytes a
# thread with the bf16 kernel's tile (64 rows, 4 warps, 3 stages).
GPU_TILE = tiles.Tile(block_n=64, num_warps=8, num_stages=2)


def fp8_tile(device: torch.device) -> tiles.Tile:
    """The FP8 per-token kernel's first tile on `device` (the interpreter's tile off the GPU)."""
    return GPU_TILE if device.type == "cuda" else tiles.INTERPRETER_TILE


def pool_needs_int64(pool: torch.Tensor) -> bool:
    """True when a byte offset into the pool can reach 2**31 and row addressing must be int64."""
    pages, rows, _, width = pool.shape
    last = (pages - 1) * pool.stride(0) + (rows - 1) * pool.stride(1) + (width - 1) * pool.stride(3)
    return last >= INT32_LIMIT


def sparse_mla_prefill_fp8(q: torch.Tensor, pool: torch.Tensor, num_rows: int, indices: torch.Tensor,
                           sm_scale: float, d_v: int = 512, *, topk_length: torch.Tensor | None = None,
                           out: torch.Tensor | None = None, tile: tiles.Tile | None = None) -> torch.Tensor:
    """Sparse-MLA prefill over each token's selected rows of the FP8 pool (module docstring); returns out
    [T, H, d_v]. A token with no valid slot gets exact zeros. No host sync (a CUDA graph can capture it).
    `tile` replaces the first tile (`fp8_tile`; the tests run the bf16 kernel with it to compare bits). Argument
    errors name the argument: TypeError for a wrong type or dtype, ValueError otherwise (an `out` that shares
    memory with q, indices, topk_length or the pool too)."""
    args = check_fp8_prefill_args(q, pool, num_rows, indices, sm_scale, d_v, topk_length)
    require_kernel_device(args.q, "q")
    if out is None:
        out = torch.empty((args.num_tokens, args.num_heads, d_v), dtype=torch.bfloat16, device=args.q.device)
    else:
        out = check_out(out, args)
        if out.numel() and out.untyped_storage().data_ptr() == pool.untyped_storage().data_ptr():
            raise ValueError("out must not share storage with pool (the kernel would write where it reads)")
    if args.num_tokens == 0:
        return out
    find_bound = kernel_finds_bound(args)
    lengths = args.topk_length
    if lengths is None and not find_bound:
        lengths = effective_lengths(args.indices, None, args.num_kv_rows)
    row_int64 = pool_needs_int64(pool)
    first = tile or fp8_tile(args.q.device)
    key = tiles.memo_key("per_token_fp8", args.num_heads, 0, args.q.device)
    tiles.launch_with_step_down(
        key, first, lambda t: launch_per_token_fp8(args, pool, lengths, out, t, row_int64, find_bound))
    return out
