"""Plain-text (markdown) tables for the CLI."""

from __future__ import annotations

import math
from collections.abc import Sequence


def fmt_cosine(value: float) -> str:
    """Cosine with 10 significant digits."""
    return "nan" if math.isnan(value) else f"{value:.10g}"


def fmt_sci(value: float) -> str:
    """A small error in scientific notation (3 significant digits)."""
    return "nan" if math.isnan(value) else f"{value:.3e}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table with columns padded to their widest cell."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
