"""Per-item progress of long checks, so a killed run resumes where it stopped.

`ItemStore(directory, fingerprint)` keeps one JSON file per finished item under
`directory/items/`, each written atomically. The fingerprint (command, model, options, items
requested) is stored beside them with the first item (a run that fails before any item finishes
leaves nothing); reopening the directory with a different fingerprint raises ValueError naming the
settings that differ (`options.band_impl`) instead of mixing two runs. Rerunning with the same `--out`
loads the finished items and computes only the rest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from glmcheck.records.layout import FINGERPRINT_FILE, ITEMS_DIR
from glmcheck.records.store import write_json_atomic

SHOWN = 6  # differing settings a refusal names (then "and N more")


def changed_settings(previous: dict, current: dict, prefix: str = "") -> list[str]:
    """The settings two fingerprints differ in, sorted, each named by its path (`options.band_impl`): a setting
    that is a dict on both sides is compared field by field."""
    changed = []
    for key in sorted(set(previous) | set(current)):
        before, after = previous.get(key), current.get(key)
        if before == after:
            continue
        if isinstance(before, dict) and isinstance(after, dict):
            changed += changed_settings(before, after, f"{prefix}{key}.")
        else:
            changed.append(f"{prefix}{key}")
    return changed


def _safe_name(key: str) -> str:
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    clean = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)[:60]
    return f"{clean}-{digest}.json"


class ItemStore:
    """Finished items of one run, keyed by a string (prompt id, prompt length...)."""

    def __init__(self, directory: str | Path | None, fingerprint: dict, writable: bool = True):
        """`writable=False` (torchrun ranks other than 0) reads finished items but writes nothing;
        `directory=None` is an empty store that keeps nothing."""
        self.writable = writable and directory is not None
        self.root = Path(directory) / ITEMS_DIR if directory is not None else None
        self.fingerprint = json.loads(json.dumps(fingerprint, sort_keys=True, default=str))
        self._fingerprint_written = False
        if self.root is None or (not self.writable and not self.root.exists()):
            return
        stored = self.root / FINGERPRINT_FILE
        self._fingerprint_written = stored.exists()
        if stored.exists():
            try:
                previous = json.loads(stored.read_text())
            except json.JSONDecodeError:
                raise ValueError(f"{stored} is not valid JSON; remove it or use another --out") from None
            if previous != self.fingerprint:
                changed = changed_settings(previous, self.fingerprint)
                more = f" and {len(changed) - SHOWN} more" if len(changed) > SHOWN else ""
                shown = ", ".join(changed[:SHOWN]) + more
                raise ValueError(f"--out {Path(directory)} holds a run with other settings ({shown}); "
                                 f"use another --out, the same settings to resume, or --overwrite to replace it")

    def load(self) -> dict[str, Any]:
        """{key: payload} of every finished item."""
        done = {}
        if self.root is None or not self.root.exists():
            return done
        for path in sorted(self.root.glob("*.json")):
            if path.name == FINGERPRINT_FILE:
                continue
            try:
                item = json.loads(path.read_text())
                done[item["key"]] = item["payload"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(f"finished item {path} is not a glmcheck item (JSON with key and payload); "
                                 f"remove it or use another --out") from None
        return done

    def save(self, key: str, payload: Any) -> None:
        """Record one finished item (atomic; nothing on a read-only store)."""
        if not self.writable:
            return
        if not self._fingerprint_written:  # written with the first item: a run that fails before leaves none
            self.root.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.root / FINGERPRINT_FILE, self.fingerprint)
            self._fingerprint_written = True
        write_json_atomic(self.root / _safe_name(key), {"key": key, "payload": payload})
