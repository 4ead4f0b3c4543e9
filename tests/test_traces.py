"""Index traces: capture on tiny, the committed fixtures, union-stats on a trace."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from glmcheck import cli
from glmcheck.backends import register_backend, unregister_backend
from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.data.indices import union_statistics
from glmcheck.data.prompts import seeded_prompt
from glmcheck.data.traces import capture_indices, read_trace, write_trace
from glmcheck.model import build_dummy_model, make_config
from glmcheck.records.store import read_record

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "traces"


def assert_kernel_convention(indices: torch.Tensor, seq_lens: list[int], topk: int) -> None:
    offset = 0
    for seq_len in seq_lens:
        for t in range(seq_len):
            row = indices[offset + t]
            valid = row[row >= 0]
            assert ((valid >= offset) & (valid <= offset + t)).all(), "causal, inside its own sequence"
            assert valid.unique().numel() == valid.numel(), "no duplicates"
            assert valid.numel() == min(t + 1, topk)
            assert (row[valid.numel():] == -1).all(), "-1 only as the trailing padding"
        offset += seq_len


def test_capture_on_tiny_gives_kernel_convention_indices(tmp_path):
    model = build_dummy_model(make_config("tiny"), seed=2)
    ids = torch.cat([seeded_prompt(512, 48, s, "cpu") for s in (0, 1)])
    layers = capture_indices(model, ids)
    assert sorted(layers) == [i for i, kind in enumerate(model.config.indexer_types) if kind == "full"]
    for indices in layers.values():
        assert indices.dtype == torch.int32 and indices.shape == (96, 32)
        assert_kernel_convention(indices, [48, 48], 32)
    path = write_trace(tmp_path / "t.safetensors", layers, {"seq_lens": [48, 48]})
    again, meta = read_trace(path)
    assert meta == {"seq_lens": [48, 48]} and all(torch.equal(again[k], layers[k]) for k in layers)


def test_capture_runs_the_absorbed_sparse_path_and_its_cli_names_bad_backends(tmp_path, capsys):
    calls = []

    def counting(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        calls.append(q.shape)
        return sparse_mla_reference(q, kv, indices, sm_scale, d_v, topk_length=topk_length, dtype=torch.float32)

    model = build_dummy_model(make_config("tiny"), seed=2)
    ids = seeded_prompt(512, 24, 0, "cpu")
    register_backend("counting_capture_test", counting, "test", fp32_output=True)
    try:
        layers = capture_indices(model, ids, "counting_capture_test")
    finally:
        unregister_backend("counting_capture_test")
    assert len(calls) == model.config.num_hidden_layers and sorted(layers) == [0, 2]  # one sparse call per layer
    assert torch.equal(layers[0], capture_indices(model, ids)[0])  # layer 0's selection precedes any attention
    out = tmp_path / "t.safetensors"
    assert cli.main(["capture-indices", "--tokens", "24", "--out", str(out), "--backend", "hf_sdpa"]) == 2
    assert "absorbed sparse path" in capsys.readouterr().err and not out.exists()
    assert cli.main(["capture-indices", "--tokens", "24", "--out", str(out)]) == 0
    default = "triton_sparse_mla" if torch.cuda.is_available() else "reference"
    assert read_trace(out)[1]["backend"] == default and "capture" in capsys.readouterr().out


def test_a_capture_out_of_memory_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    from glmcheck.data import traces

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")

    monkeypatch.setattr(traces, "capture_indices", out_of_memory)
    out = tmp_path / "t.safetensors"
    assert cli.main(["capture-indices", "--tokens", "24", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "ran out of memory" in err and "--tokens" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("name, seq_lens", [("tiny-1x256.safetensors", [256]), ("tiny-2x128.safetensors", [128, 128])])
def test_committed_traces_are_valid(name, seq_lens):
    layers, meta = read_trace(FIXTURES / name)
    assert meta["seq_lens"] == seq_lens and meta["topk"] == 32
    for indices in layers.values():
        assert_kernel_convention(indices, seq_lens, 32)


def test_union_stats_cli_on_a_trace(tmp_path, capsys):
    trace = FIXTURES / "tiny-2x128.safetensors"
    assert cli.main(["union-stats", "--indices", str(trace), "--out", str(tmp_path / "u")]) == 0
    rows = read_record(tmp_path / "u").rows
    layers, meta = read_trace(trace)
    expected = union_statistics(layers[0], (2, 4), meta["seq_lens"])
    got = rows[(rows["layer"] == 0) & (rows["group"] == 2)]["union_ratio"].item()
    assert got == pytest.approx(expected["union_ratio"][2])
    assert "layer 0" in capsys.readouterr().out


def test_bad_traces(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_trace(tmp_path / "absent.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="unreadable"):
        read_trace(tmp_path / "junk.safetensors")
    with pytest.raises(ValueError, match="at least one layer"):
        write_trace(tmp_path / "empty.safetensors", {}, {})
    assert not list(tmp_path.glob(".*tmp*")), "no temporary file left behind"
