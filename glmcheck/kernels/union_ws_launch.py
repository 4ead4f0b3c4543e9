"""Launchers of the warp-specialised 64-row union tiles (Hopper + Gluon only): the ping-pong tile
(`union_pingpong.py`) and the split tile (`union_ws.py`); `WsConfig.tile_for` picks one per
union group.

`sparse_mla_prefill` takes it for the union attention wherever `ws_supports` says yes (G*H = 64
on an sm_90 GPU, bf16, d_v 512 with a 64-wide rope tail, 16-byte aligned rows); everywhere else
the Triton union kernel runs. `scripts/ws_probe.py` checks it against the fp32 reference and the
Triton kernel and times both (H200 run 9, 1 x 8192: 1.011 vs 1.448 ms at H = 8, G = 8).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch
import triton

from glmcheck.kernels.runtime import interpreter_active, schedule
from glmcheck.kernels.union import UnionSets
from glmcheck.kernels.validate import PrefillArgs

TILES = ("auto", "split", "pingpong")
# Groups whose 64-row tile is the ping-pong one under tile="auto" (H200 run 12, note 44, benches
# against run 11's): per-token at H = 64 (G = 1) 1.07x faster (5.44 vs 5.80 ms), union 8 at H = 8
# 0.98-1.02x (the tile alone 0.99-1.05x). Union 4 at H = 16 and union 2 at H = 32 were slower in
# the bench (2.49 vs 2.35 ms, 3.80 vs 3.54), so they keep the split tile; the kernel-only probe
# that had them 1.01-1.02x faster ran the earlier whole-stage tile (note 44's correction). Run 13
# probed the half-stage tile alone at 1 x 8192: union 4 0.92x and union 2 0.92x the split tile's
# speed (0.93x each with the tail piece), so this stays.
PINGPONG_GROUPS = (1, 8)


@dataclass(frozen=True)
class WsConfig:
    """block_n KV rows per stage, `stages` stages in shared memory, producer warps and registers
    (split tile only); `tile` picks the kernel: "split" (union_ws: both consumer warpgroups on
    every block, each with half the columns), "pingpong" (union_pingpong: the warpgroups take
    alternate blocks; block_n 64 and 2 stages only; its producer is one warpgroup, each consumer
    warpgroup gets consumer_regs registers) or "auto" (`tile_for`: by the union group)."""

    block_n: int = 64  # H200 run 9: 64 rows x 2 stages beat 32 x 3 and 32 x 4 by 1.4x
    stages: int = 2
    producer_warps: int = 4
    producer_regs: int = 56
    tile: str = "auto"
    consumer_regs: int = 224  # H200 run 12: 224 beat 232 and 240 (spills, and the producer's share)

    def __post_init__(self) -> None:
        if self.tile not in TILES:
            raise ValueError(f"tile must be one of {TILES}, got {self.tile!r}")
        if self.tile == "pingpong" and (self.block_n, self.stages) != (64, 2):
            raise ValueError(f"the ping-pong tile takes block_n = 64 and stages = 2, "
                             f"got block_n={self.block_n}, stages={self.stages}")

    def tile_for(self, group: int) -> str:
        """The kernel this config runs for union groups of `group` tokens ("split" or "pingpong")."""
        if self.tile != "auto":
            return self.tile
        pingpong_shape = (self.block_n, self.stages) == (64, 2)
        return "pingpong" if pingpong_shape and group in PINGPONG_GROUPS else "split"


# Gluon's API still changes between releases (triton 3.9 renamed the cp.async copy this kernel
# uses), so the tile runs only on the triton minor versions it was compiled and tested with;
# any other version gets the Triton tile.
GLUON_TESTED_VERSIONS = ("3.6",)


def gluon_version_supported(version: str) -> bool:
    """True when triton `version` (e.g. "3.6.0") is a minor release the Gluon tile was tested on."""
    return ".".join(version.split(".")[:2]) in GLUON_TESTED_VERSIONS


@functools.cache
def device_capability(device: torch.device) -> tuple[int, int]:
    """(major, minor) compute capability of a CUDA device, looked up once per device (it cannot
    change within a process; the prefill path asks on every call)."""
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


def ws_supports(args: PrefillArgs, group: int, config: WsConfig = WsConfig()) -> bool:
    """The warp-specialised tile runs this union call: the device has it and the inputs fit it."""
    if not ws_available(args.q.device):
        return False
    try:
        check_ws_args(args, group, config)
    except ValueError:
        return False
    return True


def head_slices(num_heads: int) -> int:
    """64-head slices the ping-pong tile runs a one-token group (G = 1) of `num_heads` heads as."""
    return -(-num_heads // 64)


def check_ws_args(args: PrefillArgs, group: int, config: WsConfig = WsConfig()) -> None:
    """ValueError naming what the warp-specialised tile does not take. G*H = 64 query rows, except
    that the ping-pong tile runs one-token groups (G = 1) of any 1..128 heads as 64-head slices."""
    sliced = group == 1 and config.tile_for(group) == "pingpong"
    if not sliced and group * args.num_heads != 64:
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
                              kv_int64: bool, config: WsConfig = WsConfig()):
    """Union attention for the first len(sets.lengths) * G tokens with the Gluon kernel."""
    check_ws_args(args, sets.group, config)
    if config.tile_for(sets.group) == "pingpong":
        return launch_pingpong(args, sets, out, qk_scale_log2, kv_int64, config)
    return launch_split(args, sets, out, qk_scale_log2, kv_int64, config)


def _shared_kernel_args(args: PrefillArgs, sets: UnionSets, out: torch.Tensor, qk_scale_log2: float) -> tuple:
    """The positional arguments both Gluon tiles take, in their order: tensors, strides, scale."""
    q, kv = args.q, args.kv
    return (q, kv, sets.rows, sets.bits, sets.lengths, out,
            q.stride(0), q.stride(1), q.stride(2), kv.stride(0),
            sets.rows.stride(0), sets.bits.stride(0),
            out.stride(0), out.stride(1), out.stride(2),
            qk_scale_log2)


def launch_split(args: PrefillArgs, sets: UnionSets, out: torch.Tensor, qk_scale_log2: float,
                 kv_int64: bool, config: WsConfig):
    """The split tile (`union_ws.py`) on checked arguments."""
    from glmcheck.kernels.union_ws import CONSUMER_WARPS, sparse_mla_union_ws_kernel

    return sparse_mla_union_ws_kernel[(sets.lengths.shape[0],)](
        *_shared_kernel_args(args, sets, out, qk_scale_log2),
        H=args.num_heads, G=sets.group, D_V=args.d_v, D_TAIL=args.d_tail,
        BLOCK_N=config.block_n, NUM_STAGES=config.stages, PRODUCER_WARPS=config.producer_warps,
        PRODUCER_REGS=config.producer_regs, KV_INT64=kv_int64, LONGEST_FIRST=schedule["longest_first"],
        num_warps=CONSUMER_WARPS.value,
    )


def launch_pingpong(args: PrefillArgs, sets: UnionSets, out: torch.Tensor, qk_scale_log2: float,
                    kv_int64: bool, config: WsConfig, trace: torch.Tensor | None = None, diag: int = 0):
    """The ping-pong tile (`union_pingpong.py`) on checked arguments. Diagnostics only: `trace`,
    int64 [num_groups, 2, TRACE_SLOTS, TRACE_EVENTS] that receives %clock64 stamps, one row per
    union group (scripts/pingpong_trace.py); `diag`, the kernel's DIAG mode (0 the kernel; 1 gather
    only, 2 compute only: scripts/pingpong_ceiling.py), whose outputs are not attention."""
    from glmcheck.kernels.union_pingpong import (
        WARPGROUP_WARPS,
        sparse_mla_union_pingpong_kernel,
    )

    slices = head_slices(args.num_heads) if sets.group == 1 else 1
    tile_heads = 64 // sets.group  # query rows per token in the tile
    constants = {"H": tile_heads, "G": sets.group, "D_V": args.d_v, "D_TAIL": args.d_tail,
                 "HEAD_SLICES": slices, "PARTIAL_HEADS": args.num_heads % tile_heads != 0,
                 "BLOCK_N": config.block_n, "CONSUMER_REGS": config.consumer_regs, "KV_INT64": kv_int64,
                 "LONGEST_FIRST": schedule["longest_first"], "trace_ptr": trace, "TRACE": trace is not None,
                 "DIAG": diag, "num_warps": WARPGROUP_WARPS.value}
    if not sets.rows.is_contiguous():  # the producer reads the row width from the row stride
        sets = replace(sets, rows=sets.rows.contiguous())
    return sparse_mla_union_pingpong_kernel[(sets.lengths.shape[0] * slices,)](
        *_shared_kernel_args(args, sets, out, qk_scale_log2), args.num_heads, **constants)
