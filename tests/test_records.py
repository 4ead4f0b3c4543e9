"""Run records (atomic write / read round-trip, discovery, errors) and environment metadata."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import transformers

from glmcheck.records import store as records
from glmcheck.records.environment import config_hash, environment_metadata
from glmcheck.records.store import (
    Record,
    default_run_dir,
    find_records,
    read_record,
    write_json_atomic,
    write_parquet_atomic,
    write_record,
)


def same(a, b) -> bool:
    """Deep equality where NaN equals NaN."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def sample_summary(tmp_path: Path) -> tuple[dict, dict]:
    """(summary as given, summary as it should read back, before files/record_version)."""
    given = {
        "nan": float("nan"), "inf": float("inf"), "ninf": float("-inf"),
        "nested": {"a": [1, 2.5, None], "b": {"c": "x"}},
        "np_f32": np.float32(1.5), "np_i64": np.int64(7), "np_bool": np.bool_(True),
        "torch_scalar": torch.tensor(0.25), "torch_int": torch.tensor(3),
        "path": tmp_path / "model",
    }
    expected = {
        "nan": float("nan"), "inf": float("inf"), "ninf": float("-inf"),
        "nested": {"a": [1, 2.5, None], "b": {"c": "x"}},
        "np_f32": 1.5, "np_i64": 7, "np_bool": True,
        "torch_scalar": 0.25, "torch_int": 3,
        "path": str(tmp_path / "model"),
    }
    return given, expected


def sample_rows() -> pd.DataFrame:
    return pd.DataFrame({
        "prompt": ["a", "b", None],
        "kl": [0.1, float("nan"), 2.0],
        "passed": [True, False, True],
        "note": [None, "x", None],
    })


def sample_tensors() -> dict[str, torch.Tensor]:
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    return {
        "bf16": torch.randn(3, 5, dtype=torch.bfloat16),
        "fp64": base,
        "int32": torch.arange(10, dtype=torch.int32),
        "strided": base.t(),          # non-contiguous view sharing storage with fp64
        "slice": base[1:3, ::2],      # partial, non-contiguous view
    }


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".tmp-" in p.name)


# --------------------------------------------------------------------------- round trip


def test_round_trip(tmp_path):
    given, expected = sample_summary(tmp_path)
    rows, tensors = sample_rows(), sample_tensors()
    out = write_record(tmp_path / "deep" / "rec", given, rows, tensors)

    rec = read_record(out)
    assert isinstance(rec, Record) and rec.directory == out
    assert rec.summary["files"] == ["rows.parquet", "tensors.safetensors", "summary.json"]
    assert rec.summary["record_version"] == 2 and set(rec.summary["digest"]) == set(rec.summary["files"])
    body = {k: v for k, v in rec.summary.items() if k not in ("files", "record_version", "digest")}
    assert same(body, expected)
    pd.testing.assert_frame_equal(rec.rows, rows)
    assert rec.tensors.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert rec.tensors[name].dtype == tensor.dtype
        assert torch.equal(rec.tensors[name], tensor), name
    assert "files" not in given  # caller's dict untouched
    assert leftovers(out) == []


def test_rows_as_list_of_dicts_and_no_tensors(tmp_path):
    rows = [{"i": 0, "name": "a", "ok": True}, {"i": 1, "name": "b", "ok": False}]
    rec = read_record(write_record(tmp_path, {"n": 2}, rows))
    pd.testing.assert_frame_equal(rec.rows, pd.DataFrame(rows))
    assert rec.tensors == {}
    assert rec.summary["files"] == ["rows.parquet", "summary.json"]
    assert not (tmp_path / "tensors.safetensors").exists()


def test_rewrite_without_tensors_drops_stale_tensor_file(tmp_path):
    write_record(tmp_path, {"v": 1}, [], {"t": torch.ones(2)})
    rec = read_record(write_record(tmp_path, {"v": 2}, []))
    assert rec.summary["v"] == 2 and rec.tensors == {}


def test_public_atomic_helpers(tmp_path):
    write_json_atomic(tmp_path / "p.json", {"x": np.float64(1.0), "nan": float("nan")})
    loaded = json.loads((tmp_path / "p.json").read_text())
    assert loaded["x"] == 1.0 and math.isnan(loaded["nan"])
    df = sample_rows()
    write_parquet_atomic(tmp_path / "p.parquet", df)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "p.parquet"), df)
    assert leftovers(tmp_path) == []


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match="summary"):
        write_record(tmp_path, [1], [])
    with pytest.raises(TypeError, match="rows"):
        write_record(tmp_path, {}, "rows")
    with pytest.raises(TypeError, match="tensors"):
        write_record(tmp_path, {}, [], {"t": [1, 2]})
    with pytest.raises(TypeError, match="summary"):
        write_record(tmp_path, {"big": torch.ones(3)}, [])
    with pytest.raises(TypeError, match="df"):
        write_parquet_atomic(tmp_path / "x.parquet", [{"a": 1}])
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- atomicity


def _fail_on(monkeypatch, final_name: str) -> None:
    real = os.replace

    def flaky(src, dst):
        if Path(dst).name == final_name:
            raise OSError("disk full (simulated)")
        return real(src, dst)

    monkeypatch.setattr(records.os, "replace", flaky)


@pytest.mark.parametrize("failing", ["rows.parquet", "tensors.safetensors", "summary.json"])
def test_failed_write_leaves_no_partial_files(tmp_path, monkeypatch, failing):
    _fail_on(monkeypatch, failing)
    with pytest.raises(OSError, match="simulated"):
        write_record(tmp_path / "rec", {"v": 1}, sample_rows(), {"t": torch.ones(2)})
    assert leftovers(tmp_path / "rec") == []
    assert not (tmp_path / "rec" / "summary.json").exists()
    assert not (tmp_path / "rec" / failing).exists()


def test_failed_parquet_writer_keeps_earlier_record(tmp_path, monkeypatch):
    out = write_record(tmp_path, {"v": "old"}, sample_rows(), {"t": torch.ones(2)})

    def broken(self, *args, **kwargs):
        raise RuntimeError("writer crashed (simulated)")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", broken)
    with pytest.raises(RuntimeError, match="simulated"):
        write_record(out, {"v": "new"}, [{"a": 1}], {"t": torch.zeros(2)})
    monkeypatch.undo()

    assert leftovers(out) == []
    rec = read_record(out)
    assert rec.summary["v"] == "old"
    pd.testing.assert_frame_equal(rec.rows, sample_rows())
    assert torch.equal(rec.tensors["t"], torch.ones(2))


def test_failed_summary_replace_keeps_old_summary(tmp_path, monkeypatch):
    out = write_record(tmp_path, {"v": "old"}, [{"a": 1}])
    _fail_on(monkeypatch, "summary.json")
    with pytest.raises(OSError):
        write_record(out, {"v": "new"}, [{"a": 2}])
    monkeypatch.undo()
    assert leftovers(out) == []
    assert read_record(out, verify=False).summary["v"] == "old"
    with pytest.raises(ValueError, match=r"rows\.parquet: its content does not match the record's digest"):
        read_record(out)  # the new rows beside the old summary: a torn record is refused, not read as the old one


def test_failed_json_helper_leaves_nothing(tmp_path, monkeypatch):
    _fail_on(monkeypatch, "progress.json")
    with pytest.raises(OSError):
        write_json_atomic(tmp_path / "progress.json", {"done": 3})
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- naming / discovery


def test_default_run_dir_is_unique(tmp_path):
    first = default_run_dir("kernel", root=tmp_path)
    second = default_run_dir("kernel", root=tmp_path)
    third = default_run_dir("kernel", root=tmp_path)
    assert len({first, second, third}) == 3
    assert all(p.is_dir() and p.parent == tmp_path for p in (first, second, third))
    assert first.name.startswith("kernel-") and len(first.name) == len("kernel-20250101-000000")
    if second.name.startswith(first.name):
        assert second.name == first.name + "-2"
    with pytest.raises(ValueError, match="command"):
        default_run_dir("a/b", root=tmp_path)


def test_find_records(tmp_path):
    for name in ("b", "a", "nested/c"):
        write_record(tmp_path / name, {}, [])
    (tmp_path / "empty").mkdir()
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "rows.parquet").write_bytes(b"")
    assert find_records(tmp_path) == [tmp_path / "a", tmp_path / "b", tmp_path / "nested" / "c"]
    with pytest.raises(FileNotFoundError):
        find_records(tmp_path / "missing")


# --------------------------------------------------------------------------- read errors


def test_read_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        read_record(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="not a glmcheck record"):
        read_record(tmp_path)

    bad_summary = write_record(tmp_path / "s", {}, [])
    (bad_summary / "summary.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"summary\.json"):
        read_record(bad_summary)

    bad_rows = write_record(tmp_path / "r", {}, [{"a": 1}])
    (bad_rows / "rows.parquet").write_bytes(b"garbage, not parquet")
    with pytest.raises(ValueError, match=r"rows\.parquet"):
        read_record(bad_rows)

    bad_tensors = write_record(tmp_path / "t", {}, [], {"t": torch.ones(2)})
    (bad_tensors / "tensors.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"tensors\.safetensors"):
        read_record(bad_tensors)


# --------------------------------------------------------------------------- environment


def test_environment_metadata():
    meta = environment_metadata()
    keys = {
        "glmcheck_version", "git_sha", "git_dirty", "python_version", "torch_version",
        "triton_version", "transformers_version", "cuda_available", "gpu_name",
        "gpu_capability", "hostname", "timestamp_utc",
    }
    assert keys <= meta.keys()
    json.dumps(meta)
    assert isinstance(meta["git_sha"], str) and meta["git_sha"]
    assert isinstance(meta["git_dirty"], bool)
    assert meta["transformers_version"] == transformers.__version__
    if not meta["cuda_available"]:
        assert meta["gpu_name"] is None and meta["gpu_capability"] is None
    assert meta["timestamp_utc"].endswith("+00:00")


def test_config_hash():
    two_a = config_hash(transformers.GlmMoeDsaConfig(num_hidden_layers=2))
    two_b = config_hash(transformers.GlmMoeDsaConfig(num_hidden_layers=2))
    three = config_hash(transformers.GlmMoeDsaConfig(num_hidden_layers=3))
    assert two_a == two_b and two_a != three
    assert len(two_a) == 16 and int(two_a, 16) >= 0
    with pytest.raises(TypeError, match="config"):
        config_hash({"num_hidden_layers": 2})
