"""Plain-text (markdown) tables for the CLI, and `Table`, a check's table before it is printed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


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


@dataclass
class Table:
    """A table of a check's output, printable wide (`markdown`) or fitted to a terminal (`glmcheck.records.terminal`).

    `short` maps a header to the shorter one a terminal shows; `short_keys` replaces the first column's cells there;
    `note` names the column whose cells become numbered notes under the table; `optional` names the columns a
    terminal drops first (in order) when the table does not fit; the first `key` columns repeat when it is split;
    `legend` (a terminal's only) says what its short names mean."""

    headers: list[str]
    rows: list[list[str]]
    short: dict[str, str] = field(default_factory=dict)
    short_keys: list[str] | None = None
    note: str | None = None
    optional: tuple[str, ...] = ()
    key: int = 1
    legend: str = ""

    def markdown(self) -> str:
        """The wide form: every column, every cell in full."""
        return markdown_table(self.headers, self.rows)
