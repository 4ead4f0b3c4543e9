"""Reading what `glmcheck plan` prints: a row per term, a column per attention path."""

from __future__ import annotations


def plan_cells(text: str) -> dict[str, dict[str, str]]:
    """{term: {path label: cell}} of the plan's table in `text` (the first Markdown table in it)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].split("|")[1:-1]]
    cells = {}
    for line in lines[2:]:
        row = [cell.strip() for cell in line.split("|")[1:-1]]
        cells[row[0]] = dict(zip(header[1:], row[1:]))
    return cells
