"""The GPU's ceilings for this workload: HBM copy rate, bf16 matmul rate, selected-row gather rate.

`gather_floor_ms(point)` times the gather probe (`glmcheck.bench.gather_probe`: the per-token
path's row reads and nothing else) after checking its sums against torch, and reports the bytes
it moved: the per-token path cannot beat that time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from glmcheck.bench.gather_probe import gather_sum_kernel
from glmcheck.bench.kernel import BenchPoint, make_inputs, time_ms

PROBE_BLOCK_N = 32


def gather_sum(kv: torch.Tensor, indices: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """[T, D] fp32: per token, the sum of its valid selected rows of kv [S, D] (bf16)."""
    tokens, dim = indices.shape[0], kv.shape[1]
    if triton.next_power_of_2(dim) != dim:
        raise ValueError(f"kv rows must have a power-of-two width for the probe, got {dim}")
    out = torch.empty((tokens, dim), dtype=torch.float32, device=kv.device)
    gather_sum_kernel[(tokens,)](kv, indices, lengths, out, kv.shape[0], indices.shape[1],
                                 kv.stride(0), indices.stride(0), out.stride(0), D=dim, BLOCK_N=PROBE_BLOCK_N)
    return out


def gather_sum_reference(kv: torch.Tensor, indices: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    slots = torch.arange(indices.shape[1], device=indices.device)
    valid = (indices >= 0) & (indices < kv.shape[0]) & (slots[None, :] < lengths[:, None])
    rows = kv[torch.where(valid, indices, 0).long()].float() * valid[..., None]
    return rows.sum(dim=1)


@dataclass(frozen=True)
class GatherFloor:
    point: str
    gigabytes: float
    ms: float

    @property
    def tb_per_s(self) -> float:
        return self.gigabytes / self.ms


def gather_floor(point: BenchPoint, device: str = "cuda", mode: str = "calibrated") -> GatherFloor:
    """Time the probe at `point`: it reads the 512-wide main part (1 KiB) of every valid selected
    row; the per-token kernel reads that plus the 128-byte rope tail."""
    inputs = make_inputs(point, device=device, mode=mode)
    kv_main = inputs.kv[:, :512].contiguous()
    got = gather_sum(kv_main, inputs.indices, inputs.topk_length)
    expected = gather_sum_reference(kv_main, inputs.indices, inputs.topk_length)
    if not torch.allclose(got, expected, rtol=1e-3, atol=1e-2):
        raise AssertionError(f"gather probe disagrees with torch at {point.label}")
    valid_rows = int(((inputs.indices >= 0).sum()).item())
    gigabytes = valid_rows * kv_main.shape[1] * 2 / 1e9
    ms = time_ms(lambda: gather_sum(kv_main, inputs.indices, inputs.topk_length))
    return GatherFloor(point.label, gigabytes, ms)


def copy_tb_per_s(gigabytes: float = 8.0) -> float:
    """Device-to-device copy rate (bytes read + written per second, TB/s)."""
    src = torch.randn(int(gigabytes * 1e9 / 4 / 2), device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / ms / 1e9


def matmul_tflops(n: int = 8192) -> float:
    """bf16 n^3 matmul rate on random data (TFLOP/s)."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = time_ms(lambda: a @ b)
    return 2 * n**3 / ms / 1e9
