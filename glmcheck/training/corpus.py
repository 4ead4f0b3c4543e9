"""The trained models' training text: Python's own documentation and standard library.

Every machine with Python has it: the language reference and library topics that `pydoc` ships
(`pydoc_data.topics`) and the source of every standard-library module (its docstrings and
comments are English prose about the code beside them). Tests (`test/`, `tests/`, `idle_test/`),
site-packages and files that do not parse as UTF-8 are left out. A document is one topic or one
module file; documents are sorted by name, so a corpus is a pure function of the Python build.

Split: a document is held out when the first byte of sha256(name) is below `HELDOUT_BYTE`
(`glmcheck.data.documents`: about 3 % of documents), so the split never depends on the order or on which other files
exist.
A corpus's identity is the sha256 over (name, text) of its documents in order (`corpus_hash`),
recorded with the Python version it came from: another Python release gives another corpus.
Saved as gzip JSON lines ({"name": ..., "text": ...}), one document a line (`glmcheck.data.documents`).
"""

from __future__ import annotations

import hashlib
import platform
import sysconfig
from pathlib import Path

from glmcheck.data.documents import Document

EXCLUDED_PARTS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}


def stdlib_documents(stdlib: str | Path | None = None) -> list[Document]:
    """The pydoc topics and standard-library sources of this Python (or of the `stdlib` folder)."""
    root = Path(stdlib or sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise FileNotFoundError(f"stdlib folder {str(root)!r} does not exist")
    docs = []
    try:
        from pydoc_data.topics import topics
    except ImportError:  # a Python built without pydoc_data: sources only
        topics = {}
    for key in sorted(topics):
        docs.append(Document(f"topic/{key}", topics[key].strip() + "\n"))
    for path in sorted(root.rglob("*.py")):
        parts = set(path.relative_to(root).parts[:-1])
        if parts & EXCLUDED_PARTS:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if text.strip():
            docs.append(Document("lib/" + path.relative_to(root).as_posix(), text))
    return docs


def corpus_hash(docs: list[Document]) -> str:
    """sha256 hex digest over every document's name and text, in order."""
    digest = hashlib.sha256()
    for doc in docs:
        for part in (doc.name, doc.text):
            data = part.encode("utf-8")
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
    return digest.hexdigest()


def split(docs: list[Document]) -> tuple[list[Document], list[Document]]:
    """(training documents, held-out documents)."""
    return [d for d in docs if not d.heldout], [d for d in docs if d.heldout]


def describe(docs: list[Document]) -> dict:
    """What a training record says of its corpus: source, counts, characters, hash, file list."""
    train, heldout = split(docs)
    return {"source": f"Python {platform.python_version()} standard library + pydoc topics",
            "documents": len(docs), "train_documents": len(train), "heldout_documents": len(heldout),
            "characters": sum(len(d.text) for d in docs),
            "heldout_characters": sum(len(d.text) for d in heldout),
            "sha256": corpus_hash(docs), "heldout_names": [d.name for d in heldout]}
