"""Bad inputs at every public entry point: a documented exception (library) or exit 2 (CLI)."""

from __future__ import annotations

import math

import pytest
import torch

from glmcheck import cli
from glmcheck.backends import get_backend
from glmcheck.checks import metrics
from glmcheck.checks.common import FAIL, Gate
from glmcheck.data.inputs import random_inputs
from glmcheck.kernels import sparse_mla_prefill, union_dedup
from glmcheck.model import build_dummy_model, make_config


@pytest.fixture
def inp(device):
    return random_inputs(12, 8, 40, 16, 64, 16, seed=3, device=device)


def test_non_contiguous_inputs_are_supported(inp):
    q_strided = inp.q.transpose(0, 1).contiguous().transpose(0, 1)  # same values, token stride != H*d
    assert not q_strided.is_contiguous()
    base = sparse_mla_prefill(inp.q, inp.kv, inp.indices, inp.sm_scale, 64)
    assert torch.equal(sparse_mla_prefill(q_strided, inp.kv, inp.indices, inp.sm_scale, 64), base)
    idx_strided = inp.indices.t().contiguous().t()
    assert torch.equal(sparse_mla_prefill(inp.q, inp.kv, idx_strided, inp.sm_scale, 64), base)


def test_duplicates_detected_only_when_asked(inp):
    indices = inp.indices.clone()
    indices[4, 3] = indices[4, 7]
    with pytest.raises(ValueError, match="indices row 4 names KV row .* twice"):
        sparse_mla_prefill(inp.q, inp.kv, indices, inp.sm_scale, 64, check_inputs=True)
    with pytest.raises(ValueError, match="indices row 4 names KV row .* twice"):
        union_dedup(indices, 2, check_inputs=True)
    sparse_mla_prefill(inp.q, inp.kv, indices, inp.sm_scale, 64)  # the documented contract: not checked
    empty_dupes = inp.indices.clone()
    empty_dupes[2, :4] = -1  # repeated empty slots are not duplicates
    sparse_mla_prefill(inp.q, inp.kv, empty_dupes, inp.sm_scale, 64, check_inputs=True)


@pytest.mark.parametrize("target", ["q", "kv"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_inputs(inp, target, value):
    q, kv = inp.q.clone(), inp.kv.clone()
    (q if target == "q" else kv).view(-1)[5] = value
    with pytest.raises(ValueError, match=f"{target} contains NaN or Inf"):
        sparse_mla_prefill(q, kv, inp.indices, inp.sm_scale, 64, check_inputs=True)
    out = sparse_mla_prefill(q, kv, inp.indices, inp.sm_scale, 64)
    ref = sparse_mla_prefill(inp.q, inp.kv, inp.indices, inp.sm_scale, 64)
    if not torch.isfinite(out).all():  # the NaN reached an output: no metric may pass it
        assert math.isnan(metrics.cosine(out, ref)) and math.isnan(metrics.rel_l2(out, ref))
        assert Gate(max_rel_l2=1.0).verdict(metrics.rel_l2(out, ref), 1.0) == FAIL


def test_metrics_never_pass_nan():
    a = torch.ones(4)
    b = torch.tensor([1.0, math.nan, 1.0, 1.0])
    assert math.isnan(metrics.cosine(a, b)) and math.isnan(metrics.rel_l2(b, a)) and math.isnan(metrics.max_abs(a, b))
    assert metrics.cosine(torch.zeros(3), torch.zeros(3)) == 1.0 and metrics.rel_l2(torch.zeros(3), torch.zeros(3)) == 0.0
    assert metrics.rel_l2(torch.ones(3), torch.zeros(3)) == math.inf
    with pytest.raises(ValueError, match="same shape"):
        metrics.cosine(torch.ones(3), torch.ones(4))
    assert Gate().verdict(math.nan, 1.0) == FAIL and Gate().verdict(math.inf, 1.0) == FAIL


def test_union_dedup_bad_inputs(device):
    idx = torch.zeros((4, 4), dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="indices must have shape"):
        union_dedup(idx[0], 2)
    with pytest.raises(TypeError, match="topk_length must be torch.int32"):
        union_dedup(idx, 2, torch.zeros(4, dtype=torch.int64, device=device))
    with pytest.raises(ValueError, match=r"topk_length must have shape \[4\]"):
        union_dedup(idx, 2, torch.zeros(3, dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="num_kv_rows must be non-negative"):
        union_dedup(idx, 2, num_kv_rows=-1)
    empty = union_dedup(idx[:0], 2)
    assert empty.lengths.numel() == 0


@pytest.mark.parametrize("name", ["reference", "reference:fp64", "torch_bf16", "triton_sparse_mla"])
def test_backends_validate_like_the_kernel(inp, name):
    backend = get_backend(name)
    with pytest.raises(TypeError, match="q must be torch.bfloat16"):
        backend(inp.q.float(), inp.kv, inp.indices, inp.sm_scale, 64)
    with pytest.raises(ValueError, match="indices must have 12 rows"):
        backend(inp.q, inp.kv, inp.indices[:3], inp.sm_scale, 64)


def test_model_builder_bad_inputs():
    with pytest.raises(ValueError, match="experts must be a positive int"):
        make_config("tiny", experts=0)
    with pytest.raises(ValueError, match="init must be one of hf, sharp"):
        build_dummy_model(make_config("tiny"), init="wide")


@pytest.fixture
def bad_files(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "broken.jsonl").write_text('{"prompt": "fine"}\n{not json\n')
    (tmp_path / "no-summary").mkdir()
    return tmp_path


@pytest.mark.parametrize("args, words", [
    (["selfcheck", "--d-v", "48"], "d_v must be a power of two"),
    (["layer0", "--tokens", "0"], "--tokens must be a positive int"),
    (["layer0", "--model", "tiny", "--layers", "0"], "layers must be a positive int"),
    (["logits", "--tokens", "0"], "--tokens must be a comma-separated list"),
    (["drift", "--tp", "3"], "--tp must divide the 8 attention heads"),
    (["firsttoken", "--prompts", "{tmp}/empty.jsonl"], "is empty"),
    (["firsttoken", "--prompts", "{tmp}/broken.jsonl"], "broken.jsonl"),
    (["report", "{tmp}/no-summary"], "no summary.json"),
    (["capture-indices", "--tokens", "0", "--out", "{tmp}/t.safetensors"], "must be positive"),
    (["union-stats", "--indices", "{tmp}/absent.safetensors"], "does not exist"),
    (["layer0", "--backends", "flashmla_sparse"], "flashmla_sparse"),
])
def test_cli_bad_inputs_exit_2_with_one_line(args, words, bad_files, capsys):
    args = [a.replace("{tmp}", str(bad_files)) for a in args]
    before = sorted(p.name for p in bad_files.iterdir())
    code = cli.main(args + (["--quiet"] if args[0] in ("layer0", "logits", "drift", "firsttoken") else []))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    errors = [line for line in err if "error:" in line]
    assert len(errors) == 1 and words in errors[0], err
    assert sorted(p.name for p in bad_files.iterdir()) == before, "nothing written on a usage error"
