"""Torch references for the sparse-MLA prefill kernel (fp64 by default, fp32 option).

Same arguments as `glmcheck.kernels.sparse_mla_prefill`: per token, a softmax over its own
valid selected rows only (valid: slot below topk_length[t], row in [0, S)); rows with no valid
slot give zeros, and a NaN/Inf in q or in a selected KV row reaches the output (never zeroed).
Tokens are processed in chunks so memory stays bounded at T = 8192, topk = 2048 (about
`budget_bytes` for the gathered rows of one chunk). The fp32 reference also has a Triton form on the tensor cores
(`reference_triton`, `CheckOptions.reference_impl` or GLMCHECK_REFERENCE_IMPL=triton; the torch form stays the default
until it is timed on the GPU).
The noise band's flash-style bf16
variants (`band_variant`) live in `glmcheck.backends.band_kernels`.
"""

from __future__ import annotations

import torch

from glmcheck.backends import forms
from glmcheck.backends.band_kernels import band_variant  # noqa: F401  (the noise band's kernels, importable here)
from glmcheck.kernels.validate import check_prefill_args, valid_slot_mask


def sparse_mla_reference(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float,
                         d_v: int = 512, *, topk_length: torch.Tensor | None = None,
                         dtype: torch.dtype = torch.float64,
                         budget_bytes: int = 256 * 2**20) -> torch.Tensor:
    """Reference sparse-MLA prefill; returns [T, H, d_v] in `dtype` on q's device."""
    if dtype not in (torch.float64, torch.float32):
        raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
    args = check_prefill_args(q, kv, indices, sm_scale, d_v, topk_length)
    num_tokens, num_heads, d_qk = args.q.shape
    out = torch.zeros((num_tokens, num_heads, d_v), dtype=dtype, device=args.q.device)
    if num_tokens == 0 or args.topk == 0:
        return out
    if dtype == torch.float32 and reference_impl() == "triton":
        from glmcheck.backends.reference_triton import reference_fp32

        return reference_fp32(args.q, args.kv, args.indices, args.topk_length, args.sm_scale, d_v)
    valid = valid_slot_mask(args.indices, args.num_kv_rows, args.topk_length)
    row_bytes = args.topk * d_qk * torch.finfo(dtype).bits // 8
    chunk = max(1, budget_bytes // row_bytes)
    table = _row_table(args.kv, dtype)
    for start in range(0, num_tokens, chunk):
        stop = min(start + chunk, num_tokens)
        out[start:stop] = _reference_chunk(args.q[start:stop].to(dtype), args.kv, table,
                                           args.indices[start:stop], valid[start:stop],
                                           args.sm_scale, d_v)
    return out


def reference_impl() -> str:
    """Which form of the fp32 reference runs: "torch" (gather and softmax per token chunk; the default) or "triton"
    (`reference_triton`, on the tensor cores; on the CPU through Triton's interpreter): the active form
    (`glmcheck.backends.forms`: a check's `CheckOptions.reference_impl`, else GLMCHECK_REFERENCE_IMPL). The fp64
    reference is always the torch form."""
    return forms.active().reference


TABLE_BYTES = 1 << 30  # the largest copy of the KV rows in the reference's dtype a call makes (a prompt's rows)


def _row_table(kv: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """kv [S, D] in `dtype` with one zero row appended (index S: what an unselected slot reads), or None for a KV
    larger than TABLE_BYTES (then the rows are converted and masked per chunk: the same values)."""
    rows, width = kv.shape
    if (rows + 1) * width * torch.finfo(dtype).bits // 8 > TABLE_BYTES:
        return None
    return torch.cat([kv.to(dtype), kv.new_zeros((1, width), dtype=dtype)])


def _reference_chunk(q: torch.Tensor, kv: torch.Tensor, table: torch.Tensor | None, indices: torch.Tensor,
                     valid: torch.Tensor, sm_scale: float, d_v: int) -> torch.Tensor:
    """One chunk: q [C, H, D] (dtype), kv [S, D] bf16 (`table`: it in dtype with a zero row appended, or None),
    indices/valid [C, K] -> [C, H, d_v]."""
    if table is not None:  # an unselected slot reads the zero row (a NaN in KV row 0 stays out)
        rows = table[torch.where(valid, indices, kv.shape[0]).long()]  # [C, K, D]
    else:
        rows = kv[torch.where(valid, indices, 0).long()].to(q.dtype)
        rows = torch.where(valid[..., None], rows, 0.0)
    scores = torch.einsum("chd,ckd->chk", q, rows) * sm_scale
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    # All-masked tokens -> 0; a NaN/Inf from q or a selected row propagates: the reference never hides one.
    probs = torch.where(valid.any(dim=1)[:, None, None], torch.softmax(scores, dim=-1), 0.0)
    return torch.einsum("chk,ckd->chd", probs, rows[..., :d_v])
