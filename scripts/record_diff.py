"""Compare two run records (summary.json + rows.parquet) value for value: the "numbers equal" check of a change that
must not move a verdict (docs/performance.md, "Time to verdict").

    python scripts/record_diff.py BEFORE_DIR AFTER_DIR [BEFORE_DIR AFTER_DIR ...]

Per pair: rows and columns equal, how many float cells are the same bits, the largest relative difference of the
others, the overall verdict and each row's verdict before and after. Exit 1 when a verdict or a non-float cell
differs, or a relative difference exceeds 1e-6.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from glmcheck.records.store import read_record

TOLERANCE = 1e-6


def _floats(value) -> list[float]:
    if isinstance(value, float):
        return [value]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _floats(v)]
    if hasattr(value, "tolist"):
        return _floats(value.tolist())
    return []


def diff(before: Path, after: Path) -> tuple[str, bool]:
    a, b = read_record(before), read_record(after)
    shape = list(a.rows.columns) == list(b.rows.columns) and len(a.rows) == len(b.rows)
    same = total = 0
    worst = 0.0
    other = 0
    if shape:
        for column in a.rows.columns:
            for x, y in zip(a.rows[column], b.rows[column]):
                fx, fy = _floats(x), _floats(y)
                if fx or fy:
                    for u, v in zip(fx, fy):
                        total += 1
                        if u == v or (math.isnan(u) and math.isnan(v)):
                            same += 1
                        else:
                            worst = max(worst, abs(u - v) / max(abs(u), abs(v), 1e-300))
                    other += len(fx) != len(fy)
                elif str(x) != str(y):
                    other += 1
    # rows without a verdict column (firsttoken's per-prompt rows) have no row verdicts to differ
    verdicts = "verdict" not in a.rows.columns or list(a.rows["verdict"]) == list(b.rows.get("verdict", []))
    overall = (a.summary.get("verdict"), b.summary.get("verdict"))
    ok = shape and verdicts and other == 0 and overall[0] == overall[1] and worst <= TOLERANCE
    return (f"{before.name} -> {after.name}: {len(b.rows)} rows, rows and columns equal {shape}; floats {same}/{total} "
            f"equal bit for bit, largest relative difference {worst:.3g}; other cells differing {other}; verdict "
            f"{overall[0]} -> {overall[1]}; row verdicts equal {verdicts}"), ok


def main(argv: list[str]) -> int:
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    good = True
    for before, after in zip(argv[::2], argv[1::2]):
        line, ok = diff(Path(before), Path(after))
        print(line)
        good &= ok
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
