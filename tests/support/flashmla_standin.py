"""A stand-in for FlashMLA's sparse decode op (`_flashmla_C.sparse_decode_fwd`): its calling convention over a torch
reference that reads the FP8 pool it is handed (tests/test_flashmla_kv.py, tests/test_bench_fp8.py)."""

from __future__ import annotations

import types

import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.kernels.fp8 import dequantize_kv_pool

D_ROPE = 64


class StandIn:
    """The decode op's calling convention over a torch reference that reads the FP8 pool it is handed."""

    def __init__(self, arguments: int):
        self.default = types.SimpleNamespace(_schema=types.SimpleNamespace(arguments=[None] * arguments))
        self.calls: list[list] = []

    def __call__(self, q, cache, indices, *rest):
        self.calls.append([q, cache, indices, *rest])
        d_v, sm_scale = rest[7], rest[8]
        pages, block, _, _ = cache.shape
        rows = dequantize_kv_pool(cache.view(torch.uint8), pages * block, d_rope=D_ROPE)
        out = sparse_mla_reference(q[:, 0], rows, indices[:, 0], sm_scale, d_v, dtype=torch.float32)
        return out.bfloat16()[:, None], None, None, None
