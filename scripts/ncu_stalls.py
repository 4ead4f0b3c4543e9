"""Where a warp-specialised kernel's warps wait, from Nsight Compute's source page (`ncu --import R --page source
--csv --print-source sass`, written by scripts/gpu_ncu.sh): the stall samples of each partition (the SASS between two
`USETMAXREG` instructions: the ping-pong tile's producer and two consumers, each with its register count) and, per
mbarrier wait (a `SYNCS.PHASECHK...TRYWAIT` on a shared-memory offset, with the branch that retries it), the share of
all samples spent there. Needs pandas; no GPU.

    python3 scripts/ncu_stalls.py SASS_CSV [--top 8]
"""

from __future__ import annotations

import argparse
import re
import sys

import pandas as pd

SAMPLES = "Warp Stall Sampling (All Samples)"


def load(path: str) -> pd.DataFrame:
    """One row per SASS instruction: Address, Source, the sample counts and the stall_* columns as numbers."""
    frame = pd.read_csv(path, skiprows=1)
    frame = frame[frame["Address"].astype(str).str.startswith("0x")].reset_index(drop=True)
    for column in frame.columns[2:]:
        frame[column] = pd.to_numeric(frame[column].astype(str).str.replace(",", ""), errors="coerce").fillna(0)
    return frame


def partitions(frame: pd.DataFrame) -> list[tuple[int, int, str]]:
    """(first, end, registers) of each stretch that starts at a USETMAXREG (registers: its operand, in hex)."""
    marks = [(i, str(s).split()[-1]) for i, s in frame["Source"].items() if "USETMAXREG" in str(s)]
    bounds = [(0, "launch")] + marks
    return [(a, b, regs) for (a, regs), (b, _) in zip(bounds, bounds[1:] + [(len(frame), "")])]


def waits(frame: pd.DataFrame) -> list[tuple[float, int, str]]:
    """(share of all samples, index, barrier offset) of each mbarrier wait: the try-wait's branch where the samples
    land, found back from each predicated branch to the try-wait that sets its predicate."""
    total = frame[SAMPLES].sum()
    found = []
    for i, source in frame["Source"].items():
        branch = re.match(r"@!?(U?P\d)\s+BRA", str(source).strip())
        if not branch:
            continue
        for j in range(i - 1, max(i - 80, -1), -1):
            text = str(frame["Source"].iloc[j])
            if "TRYWAIT" in text and re.search(rf"\b{branch.group(1)},", text):
                offset = re.search(r"\+(0x[0-9a-f]+)\]", text)
                found.append((frame[SAMPLES].iloc[i] / total, i, offset.group(1) if offset else "?"))
                break
    return sorted(found, reverse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sass_csv")
    parser.add_argument("--top", type=int, default=8, help="instructions listed per partition")
    ns = parser.parse_args()
    try:
        frame = load(ns.sass_csv)
    except (OSError, ValueError, KeyError) as err:  # pandas' parse errors are ValueErrors
        print(f"ncu_stalls.py: sass_csv {ns.sass_csv!r} is not an ncu source page with SASS: {err}", file=sys.stderr)
        return 2
    if SAMPLES not in frame.columns or frame.empty:
        print(f"ncu_stalls.py: sass_csv {ns.sass_csv!r} has no {SAMPLES!r} column or no SASS rows", file=sys.stderr)
        return 2
    total = frame[SAMPLES].sum()
    stalls = [c for c in frame.columns if c.startswith("stall_") and "Not Issued" not in c]
    print(f"{len(frame)} instructions, {int(total)} samples")
    for first, end, regs in partitions(frame):
        part = frame.iloc[first:end]
        samples = part[SAMPLES].sum()
        if samples < 0.005 * total:
            continue
        reasons = part[stalls].sum().sort_values(ascending=False)
        mma = part["Source"].astype(str).str.contains("HGMMA").sum()
        print(f"\n[{first}, {end}) registers {regs}: {end - first} instructions ({mma} HGMMA), "
              f"{samples / total:.1%} of samples: " +
              ", ".join(f"{name[6:]} {value / samples:.0%}" for name, value in reasons.head(6).items()))
        for i, row in part.sort_values(SAMPLES, ascending=False).head(ns.top).iterrows():
            top = sorted(((row[c], c[6:]) for c in stalls if row[c] > 0), reverse=True)[:2]
            print(f"  {i:5d} {row[SAMPLES] / samples:6.1%}  {str(row['Source']).strip()[:64]:64s} "
                  + ", ".join(f"{name} {int(n)}" for n, name in top))
    print("\nmbarrier waits (share of all samples at the try-wait's branch; barrier = shared-memory offset):")
    for share, i, offset in waits(frame):
        if share >= 0.002:
            print(f"  {share:6.2%}  at {i:5d}  barrier {offset}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
