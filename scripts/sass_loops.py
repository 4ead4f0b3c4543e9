"""What each loop of a compiled kernel holds, read from its SASS (`cuobjdump -sass`): instructions,
warpgroup MMAs (HGMMA), cp.async copies (LDGSTS) and local-memory loads and stores (LDL, STL:
register spills). The ping-pong tile's odd warpgroup once reloaded 38 spilled wgmma descriptors a
pair this way (docs/performance.md, "Wgmma descriptors built in the loop"); `gluon_compile.py
--no-consumer-spills` and CI's Gluon compile check use it so that such spills do not come back.

Usage: python scripts/sass_loops.py KERNEL.sass   (`gluon_compile.py --sass KERNEL.sass` writes one)
A loop is the span from a predicated backward branch's target to the branch; a loop that issues
HGMMA is a consumer's loop.
"""

from __future__ import annotations

import argparse
import pathlib
import re
from dataclasses import dataclass

INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BACKWARD_TARGET = re.compile(r"\bBRA(?:\.\w+)*\s+(0x[0-9a-f]+)")


@dataclass(frozen=True)
class LoopStats:
    """One loop of a SASS listing: byte offsets of its first instruction and of its branch, and counts."""

    start: int
    end: int
    instructions: int
    wgmma: int
    cp_async: int
    local_loads: int
    local_stores: int

    @property
    def spills(self) -> int:
        """Local-memory loads and stores in the loop (each is a register spill or its reload)."""
        return self.local_loads + self.local_stores

    def describe(self) -> str:
        return (f"loop {self.start:#x}-{self.end:#x}: {self.instructions} instructions, HGMMA {self.wgmma}, "
                f"LDGSTS {self.cp_async}, LDL {self.local_loads}, STL {self.local_stores}")


def instructions(sass: str) -> list[tuple[int, str]]:
    """(byte offset, instruction text without its trailing ';') of every instruction line."""
    return [(int(found[1], 16), found[2]) for line in sass.splitlines() if (found := INSTRUCTION.match(line))]


def loops(sass: str) -> list[LoopStats]:
    """Every loop of the listing, in branch order: a predicated branch (`@P BRA`) to an earlier
    offset closes the loop that starts at that offset."""
    listing = instructions(sass)
    found = []
    for offset, text in listing:
        target = BACKWARD_TARGET.search(text)
        if not (text.startswith("@") and target) or int(target[1], 16) >= offset:
            continue
        start = int(target[1], 16)
        body = [opcode for at, opcode in listing if start <= at <= offset]
        found.append(LoopStats(start=start, end=offset, instructions=len(body),
                               wgmma=sum("HGMMA" in op for op in body),
                               cp_async=sum("LDGSTS" in op for op in body),
                               local_loads=sum(re.search(r"\bLDL\b", op) is not None for op in body),
                               local_stores=sum(re.search(r"\bSTL\b", op) is not None for op in body)))
    return found


def consumer_spills(stats: list[LoopStats]) -> list[LoopStats]:
    """The loops that issue warpgroup MMAs and also load or store local memory."""
    return [loop for loop in stats if loop.wgmma and loop.spills]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("sass", type=pathlib.Path, help="a cuobjdump -sass listing")
    ns = parser.parse_args()
    for loop in loops(ns.sass.read_text()):
        print(loop.describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
