"""Prompt sets for model-level checks, read from JSON-lines files through `datasets`.

A prompt file holds one JSON object per line: {"id": str, "prompt": str, "category": str}.
"prompt" is required (a non-empty string); a missing "id" becomes "<file stem>-<n>" (n counts
records from 1) and a missing "category" becomes "". Blank lines are skipped; other keys ignored.
Loading writes nothing to the repository or the user's cache: `datasets` builds into a
temporary directory that is deleted afterwards, and the rows are kept in memory.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a prompt becomes a tensor: the command line reads PROMPT_SETS without torch
    import torch

PROMPT_SETS: tuple[str, ...] = ("natural50", "random50", "heldout50")


def default_prompt_set(trained: bool) -> str:
    """firsttoken's prompts when none are named: held-out text of a trained model's corpus, else natural50."""
    return "heldout50" if trained else "natural50"


PROMPTS_DIR = Path(str(files("glmcheck") / "data" / "resources" / "prompts"))  # package data


@dataclass(frozen=True)
class Prompt:
    """One completion prompt: a unique id, the text, and a free-form category ("" if none)."""

    id: str
    prompt: str
    category: str


def load_prompts(spec: str | os.PathLike[str], limit: int | None = None) -> list[Prompt]:
    """The prompts of `spec` (a name in PROMPT_SETS or a path to a .jsonl file), in file order.

    Returns the first `limit` prompts (all when None). Raises FileNotFoundError for an unknown
    set or a missing file, and ValueError for a bad `limit`, an empty file, a malformed line,
    a record without a non-empty string "prompt", a bad "id"/"category", or duplicate ids.
    """
    _check_limit(limit)
    path = resolve_prompt_file(spec)
    line_numbers = _scan_json_lines(path)
    records = _read_records(path)
    if len(records) != len(line_numbers):
        raise ValueError(f"prompt file {path}: datasets read {len(records)} records "
                         f"but the file has {len(line_numbers)} non-blank lines")
    prompts = [_to_prompt(record, n, line, path)
               for n, (record, line) in enumerate(zip(records, line_numbers), 1)]
    _check_unique_ids(prompts, path)
    return prompts if limit is None else prompts[:limit]


def resolve_prompt_file(spec: str | os.PathLike[str]) -> Path:
    """The file `spec` names: PROMPTS_DIR/<spec>.jsonl for a set name, else `spec` as a path."""
    if not isinstance(spec, (str, os.PathLike)):
        raise ValueError(f"spec must be a prompt set name or a path, got {type(spec).__name__}")
    known = ", ".join(PROMPT_SETS)
    if isinstance(spec, str) and spec in PROMPT_SETS:
        path = PROMPTS_DIR / f"{spec}.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"prompt set {spec!r} should be at {path}, which does not exist "
                                    f"(known sets: {known})")
        return path
    path = Path(spec)
    if not path.is_file():
        raise FileNotFoundError(f"prompt spec {str(spec)!r} is neither a known prompt set "
                                f"({known}) nor an existing .jsonl file")
    return path


def _check_limit(limit: int | None) -> None:
    """ValueError unless `limit` is None or an int >= 1 (bools rejected)."""
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive int or None, got {limit!r}")


def _scan_json_lines(path: Path) -> list[int]:
    """1-based numbers of the non-blank lines of `path`, each checked to be a JSON object.

    `datasets` reports malformed JSON without a line number, so syntax is checked here first.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"prompt file {path} is not valid UTF-8: {err}") from err
    lines = text.split("\n")  # not splitlines(): JSON strings may hold U+2028 and friends
    numbers = [n for n, line in enumerate(lines, 1) if line.strip()]
    if not numbers:
        raise ValueError(f"prompt file {path} is empty")
    for n in numbers:
        _check_json_object(lines[n - 1], n, path)
    return numbers


def _check_json_object(line: str, line_number: int, path: Path) -> None:
    """ValueError naming the file and line unless `line` parses as a JSON object."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"prompt file {path}, line {line_number}: malformed JSON ({err.msg})") from err
    if not isinstance(value, dict):
        raise ValueError(f"prompt file {path}, line {line_number}: expected a JSON object, "
                         f"got {type(value).__name__}")


def _read_records(path: Path) -> list[dict[str, Any]]:
    """The rows of `path` via datasets' json builder, built in a throw-away cache, kept in memory."""
    import datasets  # deferred: importing datasets costs ~0.7 s and only loading needs it

    with _quiet_datasets(datasets), tempfile.TemporaryDirectory(prefix="glmcheck-prompts-") as cache:
        try:
            table = datasets.load_dataset("json", data_files=str(path.resolve()), split="train",
                                          cache_dir=cache, keep_in_memory=True)
        except Exception as err:  # datasets wraps parser failures in several exception types
            raise ValueError(f"prompt file {path}: datasets could not read it ({err})") from err
        return table.to_list()


@contextmanager
def _quiet_datasets(datasets: Any) -> Iterator[None]:
    """Progress bars off and logging at ERROR for the block; the caller's settings restored."""
    bars_were_on = datasets.is_progress_bar_enabled()
    verbosity = datasets.logging.get_verbosity()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    try:
        yield
    finally:
        datasets.logging.set_verbosity(verbosity)
        if bars_were_on:
            datasets.enable_progress_bars()


def _to_prompt(record: dict[str, Any], n: int, line: int, path: Path) -> Prompt:
    """Record `n` (from file line `line`) as a Prompt, with the documented defaults."""
    where = f"prompt file {path}, line {line} (record {n})"
    text = record.get("prompt")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where}: 'prompt' must be a non-empty string, got {text!r}")
    prompt_id = record.get("id")
    if prompt_id is None:
        prompt_id = f"{path.stem}-{n}"
    elif not isinstance(prompt_id, str) or not prompt_id:
        raise ValueError(f"{where}: 'id' must be a non-empty string, got {prompt_id!r}")
    category = record.get("category")
    if category is None:
        category = ""
    elif not isinstance(category, str):
        raise ValueError(f"{where}: 'category' must be a string, got {category!r}")
    return Prompt(prompt_id, text, category)


def _check_unique_ids(prompts: list[Prompt], path: Path) -> None:
    """ValueError listing the ids that occur more than once."""
    seen: set[str] = set()
    duplicates: list[str] = []
    for prompt in prompts:
        if prompt.id in seen and prompt.id not in duplicates:
            duplicates.append(prompt.id)
        seen.add(prompt.id)
    if duplicates:
        raise ValueError(f"prompt file {path}: duplicate ids {duplicates}")


def seeded_prompt(vocab_size: int, tokens: int, seed: int, device: torch.device) -> torch.Tensor:
    """[1, tokens] int64 ids drawn uniformly from [3, vocab) (ids 0-2 are special) by `seed`."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens must be a positive int, got {tokens!r}")
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab_size, (1, tokens), generator=generator).to(device)


def text_prompt(ids: list[int], tokens: int | None, device: torch.device) -> torch.Tensor:
    """[1, N] ids of a tokenised text, repeated cyclically up to `tokens` when that is longer."""
    if not ids:
        raise ValueError("text must not be empty")
    if tokens is not None and tokens > len(ids):
        ids = (ids * (tokens // len(ids) + 1))[:tokens]
    import torch

    return torch.tensor([ids], dtype=torch.long, device=device)

