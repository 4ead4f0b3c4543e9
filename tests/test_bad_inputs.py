"""Every bad kernel input raises the documented exception, naming the argument."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.data.inputs import random_inputs
from glmcheck.kernels import plan_sparse_mla, sparse_mla_prefill


@pytest.fixture
def good(device):
    return random_inputs(6, 8, 32, 16, 64, 16, seed=1, device=device)


def call(inp, **changes):
    kwargs = dict(q=inp.q, kv=inp.kv, indices=inp.indices, sm_scale=inp.sm_scale, d_v=inp.d_v)
    kwargs.update(changes)
    return sparse_mla_prefill(**kwargs)


@pytest.mark.parametrize("entry", [sparse_mla_prefill, sparse_mla_reference])
def test_good_inputs_pass_both_entry_points(good, entry):
    entry(good.q, good.kv, good.indices, good.sm_scale, good.d_v)


@pytest.mark.parametrize("name, make, error, words", [
    ("q fp32", lambda i: {"q": i.q.float()}, TypeError, "q must be torch.bfloat16"),
    ("kv fp8", lambda i: {"kv": i.kv.to(torch.float8_e4m3fn)}, TypeError, "kv must be torch.bfloat16"),
    ("kv uint8", lambda i: {"kv": i.kv.view(torch.uint8)}, TypeError, "kv must be torch.bfloat16"),
    ("indices int64", lambda i: {"indices": i.indices.long()}, TypeError, "indices must be torch.int32"),
    ("q not tensor", lambda i: {"q": [1.0]}, TypeError, "q must be a torch.Tensor"),
    ("q 2-d", lambda i: {"q": i.q[0]}, ValueError, "q must have shape"),
    ("q 129 heads", lambda i: {"q": i.q[:, :1].expand(-1, 129, -1)}, ValueError, "1..128 heads"),
    ("kv 3-d with 2 heads", lambda i: {"kv": i.kv[:, None].expand(-1, 2, -1)}, ValueError, "kv must have shape"),
    ("kv d_qk mismatch", lambda i: {"kv": i.kv[:, :64]}, ValueError, "kv must have d_qk = 80"),
    ("indices wrong T", lambda i: {"indices": i.indices[:5]}, ValueError, "indices must have 6 rows"),
    ("indices 1-d", lambda i: {"indices": i.indices[0]}, ValueError, "indices must have shape"),
    ("d_v not pow2", lambda i: {"d_v": 48}, ValueError, "d_v must be a power of two"),
    ("d_v too small", lambda i: {"d_v": 8}, ValueError, "d_v must be a power of two"),
    ("d_v float", lambda i: {"d_v": 64.0}, TypeError, "d_v must be an int"),
    ("tail not pow2", lambda i: {"q": i.q[..., :76], "kv": i.kv[:, :76]}, ValueError, "rope tail"),
    ("scale zero", lambda i: {"sm_scale": 0.0}, ValueError, "sm_scale must be a positive"),
    ("scale nan", lambda i: {"sm_scale": float("nan")}, ValueError, "sm_scale must be a positive"),
    ("topk_length int64", lambda i: {"topk_length": torch.zeros(6, dtype=torch.int64, device=i.q.device)},
     TypeError, "topk_length must be torch.int32"),
    ("topk_length wrong T", lambda i: {"topk_length": torch.zeros(5, dtype=torch.int32, device=i.q.device)},
     ValueError, "topk_length must have shape [6]"),
    ("out fp32", lambda i: {"out": torch.empty(6, 8, 64, device=i.q.device)}, TypeError, "out must be torch.bfloat16"),
    ("out shape", lambda i: {"out": torch.empty(6, 8, 32, dtype=torch.bfloat16, device=i.q.device)},
     ValueError, "out must have shape [6, 8, 64]"),
])
def test_bad_input_raises(good, name, make, error, words):
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        call(good, **make(good))


@pytest.mark.parametrize("union", [-1, 1, 3, 5, 16, 2.0, "2", True])
def test_bad_union_request_raises(good, union):
    """Only 0 (per-token) and G = 2, 4, 8 exist; anything else is refused, not run per-token silently."""
    with pytest.raises(ValueError, match=r"union must be 0 \(per-token\) or G = 2, 4 or 8"):
        call(good, union=union)
    with pytest.raises(ValueError, match="union must be"):
        plan_sparse_mla(good.indices, num_kv_rows=good.kv.shape[0], num_heads=good.q.shape[1], union=union)


def test_numpy_floats_are_floats(good):
    """A softmax scale computed with numpy (np.float32 / np.float64) is a float like any other."""
    for scale in (np.float32(good.sm_scale), np.float64(good.sm_scale)):
        assert torch.equal(call(good, sm_scale=scale), call(good, sm_scale=float(scale)))


@pytest.mark.gpu
def test_gpu_device_mismatch_names_argument():
    inp = random_inputs(4, 8, 16, 8, 64, 16, device="cuda")
    with pytest.raises(ValueError, match="kv must be on cuda"):
        call(inp, kv=inp.kv.cpu())
    with pytest.raises(ValueError, match="indices must be on cuda"):
        call(inp, indices=inp.indices.cpu())
    with pytest.raises(ValueError, match="q must be on a CUDA device"):
        call(random_inputs(4, 8, 16, 8, 64, 16, device="cpu"))
