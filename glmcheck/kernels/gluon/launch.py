"""Launcher of the warp-specialised 64-row union tile (Hopper + Gluon only): the ping-pong tile (`pingpong.py`), for
every union group and the per-token path: the fastest 64-row tile measured at every G (docs/performance.md, "Which
64-row tile per group").

`sparse_mla_prefill` takes it wherever `ws_supports` says yes (G*H = 64, or one-token groups at any head count on
the ping-pong tile; an sm_90 GPU, bf16, d_v 512 with a 64-wide rope tail, 16-byte aligned rows); everywhere else
the Triton kernels run.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import torch
import triton

from glmcheck.kernels.gluon.constants import BLOCK_N, PINGPONG_CONSUMER_REGS
from glmcheck.kernels.runtime import interpreter_active
from glmcheck.kernels.union import UnionSets
from glmcheck.kernels.validate import PrefillArgs

# Gluon's API still changes between releases (triton 3.9 renamed the cp.async copy these kernels use), so the tiles
# run only on the triton minor versions they were compiled and tested with; any other version gets the Triton tile.
GLUON_TESTED_VERSIONS = ("3.6",)


def gluon_version_supported(version: str) -> bool:
    """True when triton `version` (e.g. "3.6.0") is a minor release the Gluon tile was tested on."""
    return ".".join(version.split(".")[:2]) in GLUON_TESTED_VERSIONS


@functools.cache
def device_capability(device: torch.device) -> tuple[int, int]:
    """(major, minor) compute capability of a CUDA device, cached: fixed per process, and prefill asks on every call."""
    return torch.cuda.get_device_capability(device)


def ws_available(device: torch.device) -> bool:
    """True on an sm_90 CUDA device (not the interpreter) with a tested triton that has Gluon."""
    if device.type != "cuda" or interpreter_active() or device_capability(device) != (9, 0):
        return False
    if not gluon_version_supported(triton.__version__):
        return False
    try:
        import triton.experimental.gluon as _gluon  # noqa: F401  (binds no local `triton`)
    except ImportError:
        return False
    return True


def ws_supports(args: PrefillArgs, group: int) -> bool:
    """The Gluon tile runs this call: the device has it and the inputs fit it."""
    if not ws_available(args.q.device):
        return False
    try:
        check_ws_args(args, group)
    except ValueError:
        return False
    return True


def head_slices(num_heads: int) -> int:
    """64-head slices the ping-pong tile runs a one-token group (G = 1) of `num_heads` heads as."""
    return -(-num_heads // 64)


def check_ws_args(args: PrefillArgs, group: int) -> None:
    """ValueError naming what the Gluon tile does not take. Union groups need G*H = 64 query rows; one-token groups
    (G = 1) run at any 1..128 heads as 64-head slices."""
    if group != 1 and group * args.num_heads != 64:
        raise ValueError(f"the warp-specialised tile needs G*H = 64, got G={group}, H={args.num_heads}")
    if args.d_v != 512 or args.d_tail != 64:
        raise ValueError(f"the warp-specialised tile needs d_v = 512 and a 64-wide rope tail, "
                         f"got d_v={args.d_v}, tail={args.d_tail}")
    if args.kv.stride(1) != 1 or args.q.stride(2) != 1:
        raise ValueError("q and kv must be contiguous along the feature dimension")
    if args.kv.data_ptr() % 16 or args.kv.stride(0) % 8:  # cp.async copies 16-byte pieces of each row
        raise ValueError(f"kv rows must start on 16-byte boundaries, got data_ptr % 16 = "
                         f"{args.kv.data_ptr() % 16} and row stride {args.kv.stride(0)} elements")
    q = args.q  # the ping-pong tile copies Q rows by cp.async too
    if q.data_ptr() % 16 or q.stride(0) % 8 or q.stride(1) % 8:
        raise ValueError(f"q rows must start on 16-byte boundaries, got data_ptr % 16 = {q.data_ptr() % 16} "
                         f"and strides {q.stride(0)}, {q.stride(1)} elements")
    if args.q.dtype != torch.bfloat16 or args.kv.dtype != torch.bfloat16:
        raise ValueError(f"q and kv must be bfloat16, got {args.q.dtype} and {args.kv.dtype}")


def launch_union_attention_ws(args: PrefillArgs, sets: UnionSets, out: torch.Tensor, qk_scale_log2: float,
                              kv_int64: bool):
    """Union attention for the first len(sets.lengths) * G tokens with the Gluon tile, after `check_ws_args`."""
    check_ws_args(args, sets.group)
    return launch_pingpong(args, sets, out, qk_scale_log2, kv_int64)


def _shared_kernel_args(args: PrefillArgs, sets: UnionSets, out: torch.Tensor, qk_scale_log2: float) -> tuple:
    """The Gluon tile's leading positional arguments, in its order: tensors, strides, scale."""
    q, kv = args.q, args.kv
    return (q, kv, sets.rows, sets.bits, sets.lengths, out, q.stride(0), q.stride(1), q.stride(2), kv.stride(0),
            sets.rows.stride(0), sets.bits.stride(0), out.stride(0), out.stride(1), out.stride(2), qk_scale_log2)


def launch_pingpong(args: PrefillArgs, sets: UnionSets, out: torch.Tensor, qk_scale_log2: float, kv_int64: bool):
    """The ping-pong tile (`pingpong.py`) on checked arguments: one program per union group, or per token and
    64-head slice for one-token groups."""
    from glmcheck.kernels.gluon.pingpong import sparse_mla_union_pingpong_kernel
    from glmcheck.kernels.gluon.pingpong_shared import WARPGROUP_WARPS

    slices = head_slices(args.num_heads) if sets.group == 1 else 1
    tile_heads = 64 // sets.group  # query rows per token in the tile
    if not sets.rows.is_contiguous():  # the producer reads the row width from the row stride
        sets = replace(sets, rows=sets.rows.contiguous())
    return sparse_mla_union_pingpong_kernel[(sets.lengths.shape[0] * slices,)](
        *_shared_kernel_args(args, sets, out, qk_scale_log2), args.num_heads,
        H=tile_heads, G=sets.group, D_V=args.d_v, D_TAIL=args.d_tail, BLOCK_N=BLOCK_N,
        CONSUMER_REGS=PINGPONG_CONSUMER_REGS, KV_INT64=kv_int64, HEAD_SLICES=slices,
        PARTIAL_HEADS=args.num_heads % tile_heads != 0, num_warps=WARPGROUP_WARPS.value)
