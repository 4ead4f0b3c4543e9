"""The Gluon tile's launch constants (read by the launcher and by scripts/gluon_compile.py, which compiles what the
launcher launches) and which union group a program takes."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

BLOCK_N = 64  # KV rows per stage: 64 rows x 2 stages beat 32 x 3 and 32 x 4 by 1.4x (on the removed split tile)
PINGPONG_CONSUMER_REGS = 224  # beat 216, 232, 240 (docs/performance.md, "Consumer and producer registers")


@gluon.jit
def group_index():
    """This program's union group: program p takes group num_programs - 1 - p. In a causal prefill the last groups
    hold the longest rows, so they start first and the short ones fill the last wave (docs/performance.md,
    "Launch order: longest first")."""
    program = gl.program_id(0).to(gl.int64)
    return gl.num_programs(0).to(gl.int64) - 1 - program
