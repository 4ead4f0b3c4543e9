"""The corpus file format: documents (a name and a text) as gzip JSON lines, one document a line.

The held-out corpus the model checks read their natural prompts from (`glmcheck.data.heldout`) is such a file, as is
every corpus the training recipe saves (`glmcheck.training.corpus` builds them from Python's own documentation and
standard library). A document is held out when the first byte of sha256(name) is below `HELDOUT_BYTE` (about 3 % of
documents), so the split never depends on the order or on which other documents exist.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

HELDOUT_BYTE = 8  # sha256(name)[0] < 8: ~3.1 % of documents held out


@dataclass(frozen=True)
class Document:
    """One corpus document: `name` (e.g. "lib/json/decoder.py", "topic/assert") and its text."""

    name: str
    text: str

    @property
    def heldout(self) -> bool:
        return hashlib.sha256(self.name.encode()).digest()[0] < HELDOUT_BYTE


def save_documents(docs: list[Document], path: str | Path) -> None:
    """Write `docs` as gzip JSON lines (atomically: temporary name, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=9) as handle:
        for doc in docs:
            handle.write(json.dumps({"name": doc.name, "text": doc.text}) + "\n")
    tmp.replace(path)


def load_documents(path: str | Path) -> list[Document]:
    """Documents from a gzip JSON-lines file written by `save_documents`; ValueError if malformed."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file {str(path)!r} does not exist")
    docs = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                record = json.loads(line)
                if not isinstance(record, dict) or not isinstance(record.get("name"), str) \
                        or not isinstance(record.get("text"), str):
                    raise ValueError(f"line {number} is not {{'name': str, 'text': str}}")
                docs.append(Document(record["name"], record["text"]))
    except (OSError, EOFError, json.JSONDecodeError, ValueError) as err:
        raise ValueError(f"corpus file {str(path)!r} is malformed: {err}") from None
    if not docs:
        raise ValueError(f"corpus file {str(path)!r} holds no documents")
    return docs
