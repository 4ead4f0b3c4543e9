"""Random kernel inputs for checks, tests and benchmarks (never zeros).

q and kv are N(0, 1) in bf16; index rows hold distinct KV rows (as top-k produces), with
optional ragged -1 padding spread through the row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KernelInputs:
    """One kernel call's inputs: q [T, H, d_v + d_tail], kv [S, d_v + d_tail], indices [T, topk]."""

    q: torch.Tensor
    kv: torch.Tensor
    indices: torch.Tensor
    sm_scale: float
    d_v: int


def random_qkv(num_tokens: int, num_heads: int, num_kv_rows: int, d_v: int, d_tail: int,
               generator: torch.Generator, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """q [T, H, d_qk] and kv [S, d_qk], bf16 N(0, 1), drawn on the CPU from `generator`."""
    d_qk = d_v + d_tail
    q = torch.randn((num_tokens, num_heads, d_qk), generator=generator).to(torch.bfloat16)
    kv = torch.randn((num_kv_rows, d_qk), generator=generator).to(torch.bfloat16)
    return q.to(device), kv.to(device)


def random_distinct_indices(num_tokens: int, topk: int, num_kv_rows: int, generator: torch.Generator,
                            empty_fraction: float = 0.0) -> torch.Tensor:
    """[T, topk] int32 on the CPU: each row distinct rows of [0, S); a fraction of slots set to -1.

    Needs topk <= num_kv_rows. Empty slots are scattered through the row, not only at its end.
    """
    if topk > num_kv_rows:
        raise ValueError(f"topk ({topk}) must not exceed num_kv_rows ({num_kv_rows})")
    keys = torch.rand((num_tokens, num_kv_rows), generator=generator)
    rows = keys.argsort(dim=1)[:, :topk].to(torch.int32)
    if empty_fraction > 0:
        empty = torch.rand((num_tokens, topk), generator=generator) < empty_fraction
        rows = rows.masked_fill(empty, -1)
    return rows


def random_inputs(num_tokens: int, num_heads: int, num_kv_rows: int, topk: int, d_v: int = 64,
                  d_tail: int = 16, seed: int = 0, device: torch.device | str = "cpu",
                  empty_fraction: float = 0.0) -> KernelInputs:
    """Fresh random inputs with sm_scale = d_qk ** -0.5 (GLM uses qk_head_dim ** -0.5)."""
    generator = torch.Generator().manual_seed(seed)
    q, kv = random_qkv(num_tokens, num_heads, num_kv_rows, d_v, d_tail, generator, device)
    indices = random_distinct_indices(num_tokens, topk, num_kv_rows, generator, empty_fraction)
    return KernelInputs(q, kv, indices.to(device), (d_v + d_tail) ** -0.5, d_v)


def poisoned_out(num_tokens: int, num_heads: int, d_v: int, device: torch.device | str) -> torch.Tensor:
    """An output buffer [T, H, d_v] bf16 filled with NaN, so unwritten elements show."""
    return torch.full((num_tokens, num_heads, d_v), float("nan"), dtype=torch.bfloat16, device=device)
