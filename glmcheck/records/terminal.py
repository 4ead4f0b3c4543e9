"""A check's tables fitted to a terminal (`--format text`, the default): every line at most `WIDTH` characters.

A table's notes (and any cell too long for a column) become numbered notes under it, `[n]` in the cell; columns
named optional are dropped first when the table is still too wide (named under it, with `--format wide`); a table
that is still too wide is split into parts of its columns, each repeating the key columns. Text lines and notes
are wrapped at the width with a hanging indent.
"""

from __future__ import annotations

import textwrap

from glmcheck.records.tables import Table, markdown_table

WIDTH = 120
LONG_CELL = 40  # a cell longer than this (but the key column's) becomes a numbered note


class Notes:
    """Numbered notes of one output, numbered across all its tables (the same text keeps its number)."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.flushed = 0

    def add(self, text: str) -> str:
        """The reference `[n]` to `text` (numbered on first sight)."""
        if text not in self.texts:
            self.texts.append(text)
        return f"[{self.texts.index(text) + 1}]"

    def flush(self, width: int = WIDTH) -> list[str]:
        """The lines of the notes added since the last flush, each wrapped at `width`."""
        lines = []
        for number, text in enumerate(self.texts[self.flushed:], start=self.flushed + 1):
            lines += wrap(f"[{number}] {text}", width, indent=len(f"[{number}] "))
        self.flushed = len(self.texts)
        return lines


def wrap(text: str, width: int = WIDTH, indent: int = 2) -> list[str]:
    """`text` wrapped at `width`, line by line; continuation lines indented by `indent` spaces."""
    out = []
    for line in text.splitlines() or [""]:
        out += textwrap.wrap(line, width, subsequent_indent=" " * indent, break_long_words=True,
                             break_on_hyphens=False) or [""]
    return out


def _width(headers: list[str], rows: list[list[str]]) -> int:
    """The width of a markdown table's lines."""
    columns = [max([len(headers[i])] + [len(r[i]) for r in rows]) for i in range(len(headers))]
    return sum(columns) + 3 * len(columns) + 1


def _cells(table: Table, notes: Notes) -> tuple[list[str], list[list[str]]]:
    """Short headers and keys; the note column's cells and every over-long cell as note references."""
    headers = [table.short.get(h, h) for h in table.headers]
    note = table.headers.index(table.note) if table.note in table.headers else None
    rows = []
    for i, row in enumerate(table.rows):
        cells = [str(c) for c in row]
        if table.short_keys is not None:
            cells[0] = table.short_keys[i]
        for j, cell in enumerate(cells):
            if j == note:
                cells[j] = notes.add(cell) if cell else ""
            elif j >= table.key and len(cell) > LONG_CELL:
                cells[j] = cell[:LONG_CELL - 8] + "... " + notes.add(f"{headers[j]}: {cell}")
        rows.append(cells)
    if note is not None:
        headers[note] = "note"
    return headers, rows


def _columns(headers: list[str], rows: list[list[str]], keep: list[int]) -> tuple[list[str], list[list[str]]]:
    return [headers[i] for i in keep], [[r[i] for i in keep] for r in rows]


def _shorten_keys(rows: list[list[str]], key: int, room: int) -> list[list[str]]:
    """Key cells cut to `room` characters ("..." at the end) when a key is wider than any table allows."""
    if room < 8:
        return rows
    cut = [[c if j >= key or len(c) <= room else c[:room - 3] + "..." for j, c in enumerate(r)] for r in rows]
    return cut


def fit(table: Table, notes: Notes, width: int = WIDTH) -> list[str]:
    """The lines of `table` fitted to `width` (module docstring); its new notes go to `notes` (not printed here)."""
    headers, rows = _cells(table, notes)
    keep = list(range(len(headers)))
    dropped = []
    for name in table.optional:
        if _width(*_columns(headers, rows, keep)) <= width:
            break
        if name in table.headers and table.headers.index(name) in keep:
            keep.remove(table.headers.index(name))
            dropped.append(headers[table.headers.index(name)])
    key = [i for i in keep if i < table.key]
    rest = [i for i in keep if i >= table.key]
    key_width = _width(*_columns(headers, rows, key)) if key else 1
    widest = max([0] + [_width(*_columns(headers, rows, [i])) - 1 for i in rest])
    if key and key_width + widest > width:  # keys too wide for even one more column: cut them
        room = width - widest - 3 * len(key) - 1 - sum(
            max([len(headers[i])] + [len(r[i]) for r in rows]) for i in key[1:])
        rows = _shorten_keys(rows, table.key, room)
        key_width = _width(*_columns(headers, rows, key))
    parts, current = [], []
    for i in rest:
        if current and key_width + _width(*_columns(headers, rows, current + [i])) - 1 > width:
            parts.append(current)
            current = []
        current.append(i)
    parts.append(current)
    lines = []
    for n, part in enumerate(parts):
        if n:
            lines.append("")
        lines += markdown_table(*_columns(headers, rows, key + part)).splitlines()
    if dropped:
        lines += wrap(f"not shown: {', '.join(dropped)} (--format wide shows every column)", width)
    return lines


def render_text(parts: list[str | Table], gate: str | None, verdict: str | None) -> str:
    """`parts` fitted to WIDTH columns: each table's notes numbered under it (only notes a cell points to), then
    the gate and the verdict, unnumbered."""
    notes, blocks = Notes(), []
    for part in parts:
        if isinstance(part, Table):
            block = wrap(part.legend) if part.legend else []
            block += fit(part, notes)
            blocks.append("\n".join(block + notes.flush()))
        else:
            blocks.append("\n".join(wrap(part)))
    tail = wrap(f"gate: {gate}", indent=6) if gate else []
    return "\n\n".join(blocks) + "\n" + "\n".join(tail + [f"verdict: {verdict}"])
