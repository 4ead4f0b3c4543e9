"""What a record directory holds, by name only (no torch, no pandas: the command line checks `--out`
with it before any heavy import).

A record is `summary.json` (written last, so its presence means a complete record), `rows.parquet`,
optionally `tensors.safetensors`, the PNGs `glmcheck report --plots` draws beside it
(`plot-<command>.png`) and, for a resumable run, `items/` (its fingerprint and one JSON file per
finished item). `occupant` says what an existing directory holds that a run would destroy;
`clear_record` removes a record's own files (and nothing else) before `--overwrite` replaces it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

SUMMARY_FILE = "summary.json"
ROWS_FILE = "rows.parquet"
TENSORS_FILE = "tensors.safetensors"
ITEMS_DIR = "items"
FINGERPRINT_FILE = "fingerprint.json"
PLOT_GLOB = "plot-*.png"
PROBE_PREFIX = ".glmcheck-probe-"  # the write probe of `glmcheck.evaluate.arguments.check_writable_dir`


def _command_of(path: Path) -> str | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("command")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


def occupant(directory: str | os.PathLike) -> str | None:
    """What `directory` holds, in words, or None when it is absent or empty: "a layer0 record", "an
    unfinished logits run", or "3 entries (a.txt, b, c.csv) and no glmcheck record"."""
    path = Path(directory)
    if not path.is_dir():
        return None
    entries = sorted(e.name for e in path.iterdir() if not e.name.startswith(PROBE_PREFIX))
    if not entries:
        return None
    if (path / SUMMARY_FILE).is_file():
        command = _command_of(path / SUMMARY_FILE)
        return f"a {command} record" if command else f"a record ({SUMMARY_FILE} of no known command)"
    if (path / ITEMS_DIR).is_dir():
        command = _command_of(path / ITEMS_DIR / FINGERPRINT_FILE)
        return f"an unfinished {command} run" if command else f"a resumable run's {ITEMS_DIR}/"
    shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
    return f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} ({shown}) and no glmcheck record"


def holds_record(directory: str | os.PathLike) -> bool:
    """True when `directory` holds a record or a resumable run's items (what `clear_record` removes)."""
    path = Path(directory)
    return (path / SUMMARY_FILE).is_file() or (path / ITEMS_DIR).is_dir()


def resumable_items(directory: str | os.PathLike) -> bool:
    """True when `directory` holds a resumable run's items/ (which `ItemStore` checks itself)."""
    return (Path(directory) / ITEMS_DIR).is_dir()


def clear_record(directory: str | os.PathLike) -> None:
    """Remove the record in `directory`: summary.json first (so it no longer reads as a complete
    record), then its rows, tensors, plots and a resumable run's items/. Other files stay."""
    path = Path(directory)
    if not path.is_dir():
        return
    for name in (SUMMARY_FILE, ROWS_FILE, TENSORS_FILE):
        (path / name).unlink(missing_ok=True)
    for plot in path.glob(PLOT_GLOB):
        plot.unlink(missing_ok=True)
    if (path / ITEMS_DIR).is_dir():
        shutil.rmtree(path / ITEMS_DIR)
