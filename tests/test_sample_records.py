"""The notebook's committed sample (glmcheck/data/resources/sample_records/, scripts/make_sample_records.py) is in
today's format: each record passes today's record check and holds the fields today's command writes, no more and no
fewer (its summary's keys, its facts' keys, its rows' columns, the record version). A stale sample fails here:
regenerate it with `python scripts/make_sample_records.py`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from glmcheck import cli
from glmcheck.records.record_fields import check_record
from glmcheck.records.render import render
from glmcheck.records.samples import sample_records_dir
from glmcheck.records.store import RECORD_VERSION, find_records, read_record

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = sample_records_dir()
SMALL = {"layer0": ["--tokens", "32"], "drift": ["--tokens", "32"], "logits": ["--tokens", "24"],
         "firsttoken": ["--limit", "2"]}  # today's command at a smaller size writes the same fields


def _runs() -> dict[str, list[str]]:
    spec = importlib.util.spec_from_file_location("make_sample_records", ROOT / "scripts" / "make_sample_records.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.RUNS


def _small(args: list[str]) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--tokens", "--continue"):  # a continuation writes no other fields, only more forwards
            skip = True
        else:
            out.append(arg)
    return out + SMALL.get(args[0], []) + (["--quiet"] if args[0] != "union-stats" else [])


def _fields(record) -> dict[str, set[str]]:
    summary = record.summary
    return {"summary": set(summary), "facts": set(summary.get("facts") or {}), "rows": set(record.rows.columns),
            "options": set(summary.get("options") or {}), "model": set(summary.get("model") or {})}


def test_the_sample_holds_every_record_the_notebook_reads():
    assert {p.name for p in find_records(SAMPLE)} == set(_runs())


@pytest.mark.parametrize("name", sorted(_runs()))
def test_the_sample_is_in_todays_format(name, tmp_path, capsys):
    sample = read_record(SAMPLE / name)
    assert sample.summary.get("record_version") == RECORD_VERSION
    if sample.summary.get("verdict") is not None:
        check_record(sample.summary, sample.rows)
    render(sample.summary, sample.rows)
    assert cli.main(_small(_runs()[name]) + ["--out", str(tmp_path / name)]) in (0, 1)
    capsys.readouterr()
    today = _fields(read_record(tmp_path / name))
    stale = {part: (sorted(fields - today[part]), sorted(today[part] - fields))
             for part, fields in _fields(sample).items() if fields != today[part]}
    assert not stale, (f"{name}: the sample's fields differ from today's (sample only, today only): {stale}; "
                       f"run python scripts/make_sample_records.py")
