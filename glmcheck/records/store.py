"""Run records: a directory holding summary.json, rows.parquet and optionally tensors.safetensors.

Every file is written atomically (temporary file in the same directory, flush + fsync, then
`os.replace`), and summary.json is replaced last, so a directory containing summary.json
holds a complete record. On failure no temporary file is left behind and no final-named file
is partially written. summary.json may contain NaN / Infinity (Python's json dialect).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
import safetensors.torch
import torch

from glmcheck.records.digest import check_digest, seal
from glmcheck.records.layout import ROWS_FILE, SUMMARY_FILE, TENSORS_FILE

RECORD_VERSION = 2  # 2: sealed with a content digest (`glmcheck.records.digest`)

PathLike = str | os.PathLike


@dataclass
class Record:
    """A record read back from disk; tensors is {} when the record has no tensors file."""

    directory: Path
    summary: dict[str, Any]
    rows: pd.DataFrame
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


# --------------------------------------------------------------------------- naming


def default_run_dir(command: str, root: PathLike = "runs") -> Path:
    """Create and return a fresh `root/<command>-<YYYYmmdd-HHMMSS>` (UTC) directory.

    If that name is taken, `-2`, `-3`, ... is appended. The directory is created here
    (exclusively), so concurrent callers never receive the same path.
    """
    if not isinstance(command, str) or not command or os.sep in command or "/" in command:
        raise ValueError(f"command: expected a non-empty name without path separators, got {command!r}")
    base = f"{command}-{_dt.datetime.now(_dt.UTC):%Y%m%d-%H%M%S}"
    root_path = Path(root)
    root_path.mkdir(parents=True, exist_ok=True)
    suffix = 1
    while True:
        candidate = root_path / (base if suffix == 1 else f"{base}-{suffix}")
        try:
            candidate.mkdir()
        except FileExistsError:
            suffix += 1
            continue
        return candidate


# --------------------------------------------------------------------------- atomic writes


def _temp_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.tmp-{os.getpid()}")


def _fsync_dir(directory: Path) -> None:
    """Best-effort fsync of a directory so renames inside it are durable."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _stage(final: Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Write `final`'s content to its temporary sibling via `write(fh)`, fsync, return the temp path."""
    temp = _temp_path(final)
    with open(temp, "wb") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())
    return temp


def _stage_file(final: Path, write: Callable[[Path], None]) -> Path:
    """Like `_stage` for writers that only accept a filename."""
    temp = _temp_path(final)
    write(temp)
    fd = os.open(temp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return temp


def _discard(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def _write_atomic(final: Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Stage `final` via `write(fh)` and move it into place; the temporary never survives."""
    temp = _temp_path(final)
    try:
        _stage(final, write)
        os.replace(temp, final)
        _fsync_dir(final.parent)
    finally:
        _discard([temp])
    return final


# --------------------------------------------------------------------------- encoders


def _json_default(value: Any) -> Any:
    """JSON fallback: Path -> str, numpy/torch scalars -> Python numbers, small arrays -> lists."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise TypeError(
                f"summary: only single-element tensors can be JSON-encoded, got shape {tuple(value.shape)}"
            )
        return value.detach().cpu().item()
    if isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    raise TypeError(f"summary: cannot JSON-encode a value of type {type(value).__name__}")


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, indent=2, allow_nan=True, default=_json_default).encode("utf-8") + b"\n"


def _as_frame(rows: pd.DataFrame | list[dict]) -> pd.DataFrame:
    if isinstance(rows, pd.DataFrame):
        return rows
    if isinstance(rows, list) and all(isinstance(row, dict) for row in rows):
        return pd.DataFrame(rows)
    raise TypeError(f"rows: expected a pandas DataFrame or a list of dicts, got {type(rows).__name__}")


def _cpu_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached, contiguous CPU tensors, each owning its storage (safetensors rejects shared views)."""
    if not isinstance(tensors, dict):
        raise TypeError(f"tensors: expected a dict of str -> torch.Tensor, got {type(tensors).__name__}")
    out: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise TypeError(
                f"tensors: expected str -> torch.Tensor entries, got {type(name).__name__} -> "
                f"{type(tensor).__name__} for {name!r}"
            )
        flat = tensor.detach().cpu().contiguous()
        if flat.untyped_storage().nbytes() != flat.numel() * flat.element_size():
            flat = flat.clone()
        out[name] = flat
    return out


def _frame_writer(df: pd.DataFrame) -> Callable[[IO[bytes]], None]:
    return lambda fh: df.to_parquet(fh, engine="pyarrow")


def _tensor_writer(tensors: dict[str, torch.Tensor]) -> Callable[[Path], None]:
    return lambda path: safetensors.torch.save_file(tensors, str(path))


# --------------------------------------------------------------------------- public writers


def write_json_atomic(path: PathLike, obj: Any) -> Path:
    """Atomically write `obj` as JSON to `path` (NaN/inf allowed, numpy/torch scalars and Paths encoded)."""
    final = Path(path)
    payload = _json_bytes(obj)
    return _write_atomic(final, lambda fh: fh.write(payload))


def write_parquet_atomic(path: PathLike, df: pd.DataFrame) -> Path:
    """Atomically write DataFrame `df` to `path` as parquet (pyarrow)."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"df: expected a pandas DataFrame, got {type(df).__name__}")
    final = Path(path)
    return _write_atomic(final, _frame_writer(df))


def write_record(
    directory: PathLike,
    summary: dict,
    rows: pd.DataFrame | list[dict],
    tensors: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write a record into `directory` (created with parents) and return the directory.

    All files are staged to temporaries first, then moved into place with summary.json last;
    a stale tensors.safetensors is removed when `tensors` is None. The written summary is a
    copy of `summary` with `files` (names written), `record_version` and `digest` (the content digest of
    every file, `glmcheck.records.digest`) added.
    """
    if not isinstance(summary, dict):
        raise TypeError(f"summary: expected a dict, got {type(summary).__name__}")
    frame = _as_frame(rows)
    cpu = _cpu_tensors(tensors) if tensors is not None else None
    files = [ROWS_FILE] + ([TENSORS_FILE] if cpu is not None else []) + [SUMMARY_FILE]
    body = json.loads(_json_bytes({**summary, "files": files, "record_version": RECORD_VERSION}))

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    staged: list[tuple[Path, Path]] = []
    try:
        staged.append((_stage(out / ROWS_FILE, _frame_writer(frame)), out / ROWS_FILE))
        if cpu is not None:
            staged.append((_stage_file(out / TENSORS_FILE, _tensor_writer(cpu)), out / TENSORS_FILE))
        payload = _json_bytes(seal(body, {final.name: temp for temp, final in staged}))
        staged.append((_stage(out / SUMMARY_FILE, lambda fh: fh.write(payload)), out / SUMMARY_FILE))
        _commit(staged, out, remove_tensors=cpu is None)
    finally:
        _discard([_temp_path(out / name) for name in (ROWS_FILE, TENSORS_FILE, SUMMARY_FILE)])
    return out


def _commit(staged: list[tuple[Path, Path]], out: Path, remove_tensors: bool) -> None:
    """Move staged temporaries onto their final names in order (summary last)."""
    for temp, final in staged:
        if final.name == SUMMARY_FILE and remove_tensors:
            _discard([out / TENSORS_FILE])
        os.replace(temp, final)
    _fsync_dir(out)


# --------------------------------------------------------------------------- readers


def _read_summary(path: Path) -> dict[str, Any]:
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable or corrupt summary ({exc})") from exc
    if not isinstance(summary, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(summary).__name__}")
    return summary


def _read_rows(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise ValueError(f"{path}: missing from the record (incomplete record)")
    try:
        return pd.read_parquet(path, engine="pyarrow")
    except Exception as exc:  # pyarrow raises several unrelated types for bad files
        raise ValueError(f"{path}: unreadable or corrupt parquet ({exc})") from exc


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        return {}
    try:
        return safetensors.torch.load_file(str(path))
    except Exception as exc:  # SafetensorError does not subclass a builtin error
        raise ValueError(f"{path}: unreadable or corrupt safetensors ({exc})") from exc


def read_record(directory: PathLike, *, verify: bool = True) -> Record:
    """Read the record in `directory`; with `verify`, first check its content against its digest
    (`glmcheck.records.digest.check_digest`: a record edited after it was written is refused).

    Raises FileNotFoundError if the directory or its summary.json is missing, and ValueError
    naming the file if summary.json, rows.parquet or tensors.safetensors is missing/corrupt or
    (with `verify`) does not match the digest.
    """
    path = Path(directory)
    if not path.exists():
        raise FileNotFoundError(f"directory: record directory {path} does not exist")
    if not path.is_dir():
        raise NotADirectoryError(f"directory: {path} is not a directory")
    summary_path = path / SUMMARY_FILE
    if not summary_path.is_file():
        raise FileNotFoundError(f"{path} is not a glmcheck record (no {SUMMARY_FILE})")
    summary = _read_summary(summary_path)
    if verify:
        check_digest(path, summary)
    return Record(path, summary, _read_rows(path / ROWS_FILE), _read_tensors(path / TENSORS_FILE))


def find_records(root: PathLike) -> list[Path]:
    """Sorted list of every directory at or under `root` that contains summary.json."""
    base = Path(root)
    if not base.is_dir():
        raise FileNotFoundError(f"root: {base} is not an existing directory")
    return sorted(p.parent for p in base.rglob(SUMMARY_FILE) if p.is_file())
