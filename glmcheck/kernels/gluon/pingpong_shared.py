"""Shapes, layouts and indices the ping-pong tile's partitions share (`pingpong.py` holds the
kernel and its protocol)."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from glmcheck.kernels.gluon.constants import group_index

BLOCK_M = gl.constexpr(64)  # query rows per program: one warpgroup MMA tile (G * H)
WARPGROUP_WARPS = gl.constexpr(4)  # each partition is one warpgroup (the launch's num_warps)
LEFT = gl.constexpr(0)  # half index: main columns [0, D_HALF)
RIGHT = gl.constexpr(1)  # half index: main columns [D_HALF, D_V) and the rope tail
ODD_TAIL = gl.constexpr(4)  # barrier index of stage 1's rope tail, a piece of its own
NUM_PIECES = gl.constexpr(5)  # barrier pairs: [stage * 2 + half], then ODD_TAIL

# One consumer warpgroup's register layouts, for the only shape this tile takes (the kernel asserts BLOCK_N = 64
# and D_V = 512): S [64, 64], O [64, 256] (its half of the columns), P as the A operand of O += P V, and one value
# per query row.
D_HALF = gl.constexpr(256)
S_LAYOUT = gl.constexpr(gl.NVMMADistributedLayout([3, 0], [4, 1], [16, 64, 16]))
O_LAYOUT = gl.constexpr(gl.NVMMADistributedLayout([3, 0], [4, 1], [16, 256, 16]))
P_LAYOUT = gl.constexpr(gl.DotOperandLayout(0, O_LAYOUT, 2))
ROW_LAYOUT = gl.constexpr(gl.SliceLayout(1, S_LAYOUT))
# Gathers (KV halves, rope tails and Q): 8 threads per row, 16 bytes each (a 128-byte line per warp row), so a
# thread holds 4 of a block's 64 rows. With 16 threads per row (8 rows a thread) the producer's pair loop took 487
# instructions against 225 (row offsets and 64-bit addresses for twice the rows at 56 registers): 1.09x at H = 64
# and 1.07x at union 8 (docs/performance.md, "Ping-pong gathers: 8 threads per row").
MAIN_GATHER = gl.constexpr(gl.BlockedLayout([1, 8], [4, 8], [WARPGROUP_WARPS, 1], [1, 0]))
# The staged write-out: a warp stores one row's half of O (256 columns, 512 bytes) per instruction, 16 bytes a thread.
OUT_STORE = gl.constexpr(gl.BlockedLayout([1, 8], [1, 32], [WARPGROUP_WARPS, 1], [1, 0]))


@gluon.jit
def tile_index(HEAD_SLICES: gl.constexpr):
    """(union group, first head) of this program's tile. With HEAD_SLICES > 1 (G = 1, more than 64 heads) program p
    takes the 64 heads from BLOCK_M * (p % HEAD_SLICES) of token p // HEAD_SLICES: a token's slices are neighbours
    in launch order, so they run side by side and the later ones read its gathered KV rows from L2. Programs run
    in reverse order (`group_index`)."""
    program = group_index()
    if HEAD_SLICES == 1:
        group = program
        head0 = gl.program_id(0) * 0  # int32 0: head offsets stay 32-bit, as without slices
    else:
        group = program // HEAD_SLICES
        head0 = (program % HEAD_SLICES).to(gl.int32) * BLOCK_M
    return group, head0


@gluon.jit
def half_index(stage: gl.constexpr, half: gl.constexpr):
    """Index of a stage half in the barrier arrays [NUM_PIECES, 1]."""
    return stage * 2 + half
