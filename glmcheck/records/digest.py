"""A record's content digest: what was written is what is read.

`write_record` seals every record: summary.json carries `digest`, the SHA-256 of each file it wrote (rows.parquet,
tensors.safetensors) and of the summary itself (its canonical JSON without `digest["summary.json"]`, so the file
digests are covered too). `check_digest` recomputes them on reading; a file edited after it was written, one added
or taken away, is named in one line. A digest is no signature: whoever recomputes it can still forge a record, and
`glmcheck.records.rejudge` then recomputes each verdict from the rows.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from glmcheck.records.layout import ROWS_FILE, SUMMARY_FILE, TENSORS_FILE

DIGEST_FIELD = "digest"
CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of a file's bytes."""
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            sha.update(block)
    return sha.hexdigest()


def summary_sha256(summary: dict[str, Any]) -> str:
    """The hex SHA-256 of `summary` as JSON with sorted keys and no spaces, less `digest["summary.json"]`. Call it on
    the summary as read back from JSON (what `write_record` does before sealing), so that writing and reading digest
    the same values."""
    body = dict(summary)
    if isinstance(body.get(DIGEST_FIELD), dict):
        body[DIGEST_FIELD] = {k: v for k, v in body[DIGEST_FIELD].items() if k != SUMMARY_FILE}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True, ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal(summary: dict[str, Any], files: dict[str, Path]) -> dict[str, Any]:
    """`summary` (as read back from JSON) with its digest: of each of `files` (record file name -> the path holding
    its bytes now, a staged temporary) and of the summary itself."""
    digest = {name: file_sha256(path) for name, path in files.items()}
    sealed = {**summary, DIGEST_FIELD: digest}
    digest[SUMMARY_FILE] = summary_sha256(sealed)
    return sealed


def check_digest(directory: Path, summary: dict[str, Any]) -> None:
    """ValueError naming the file when the record in `directory` is not the one its digest describes: no digest (a
    record glmcheck did not seal, or one whose digest was removed), a summary or file edited since it was written, a
    file the digest names that is missing, or a tensors file it does not name."""
    digest = summary.get(DIGEST_FIELD)
    if not isinstance(digest, dict) or not isinstance(digest.get(SUMMARY_FILE), str):
        raise ValueError(f"{SUMMARY_FILE}: no digest: not a record glmcheck wrote (or one written before records were "
                         f"sealed, or edited); rerun the command")
    if summary_sha256(summary) != digest[SUMMARY_FILE]:
        raise ValueError(f"{SUMMARY_FILE}: its content does not match its digest: edited after it was written")
    for name in (ROWS_FILE, TENSORS_FILE):
        path = directory / name
        if name not in digest:
            if path.exists():
                raise ValueError(f"{name}: a file the record's digest does not name (added after it was written)")
            continue
        if not path.is_file():
            raise ValueError(f"{name}: missing from the record (its digest names it)")
        if file_sha256(path) != digest[name]:
            raise ValueError(f"{name}: its content does not match the record's digest: edited after it was written (or "
                             f"written by a run that failed midway)")
