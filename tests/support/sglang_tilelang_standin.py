"""A stand-in for SGLang's tilelang_kernel.py, loaded by path as the real module is
(`glmcheck.backends.tilelang_sparse.load_module_file`; tests/test_bench_tilelang.py): the same imports of SGLang's
platform queries, the same `tilelang_sparse_fwd(q, kv, indices, sm_scale, d_v)` convention ([T, H, d_qk], [S, 1, d_qk],
[T, 1, topk] int32 -> [1, T, H, d_v]) and the same shape asserts, over the fp32 torch reference. Not importable as a
plain module: its SGLang imports resolve only while the loader's stubs are in place."""

from __future__ import annotations

import torch
from sglang.kernels.ops.quantization.fp8_kernel import is_fp8_fnuz
from sglang.srt.utils import is_gfx95_supported, is_hip

from glmcheck.backends.reference import sparse_mla_reference

PLATFORM = (is_hip(), is_gfx95_supported(), is_fp8_fnuz())  # what the loader's stubs answered
calls: list[tuple] = []  # (q shape, kv shape, indices shape, indices dtype) per call
scale_error = 1.0  # a planted fault when set: the softmax scale off by this factor
fail_with: Exception | None = None  # raised by the next calls when set (a compile error, say)


def tilelang_sparse_fwd(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float,
                        d_v: int = 512) -> torch.Tensor:
    assert q.dim() == 3 and kv.dim() == 3 and indices.dim() == 3
    assert indices.shape[-1] % 64 == 0, "topk must be padded to a multiple of 64"
    assert q.shape[1] <= 64 or q.shape[1] % 64 == 0, "head_kv should be a multiple of 64"
    calls.append((tuple(q.shape), tuple(kv.shape), tuple(indices.shape), indices.dtype))
    if fail_with is not None:
        raise fail_with
    out = sparse_mla_reference(q, kv[:, 0], indices[:, 0], sm_scale * scale_error, d_v, dtype=torch.float32)
    return out.to(torch.bfloat16)[None]
