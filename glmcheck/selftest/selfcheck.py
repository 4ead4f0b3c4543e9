"""Kernel self-check: random inputs, every kernel path against the fp64 reference.

The library behind `glmcheck selfcheck`. Rows compare each path with the fp64 reference beside
the fp32 reference (the noise floor of a careful implementation) and a rerun of the kernel
(which must be bitwise identical).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.checks import metrics
from glmcheck.data.indices import drifting_indices
from glmcheck.data.inputs import poisoned_out, random_distinct_indices, random_qkv
from glmcheck.kernels import sparse_mla_prefill

REL_L2_GATE = 3e-3
COSINE_GATE = 0.99999


@dataclass(frozen=True)
class SelfcheckShape:
    """Problem size: tokens, heads, KV rows, top-k, value dim and rope-tail dim."""

    tokens: int
    heads: int
    kv_rows: int
    topk: int
    d_v: int
    d_tail: int


CPU_DEFAULT = SelfcheckShape(tokens=64, heads=8, kv_rows=256, topk=128, d_v=64, d_tail=16)
GPU_DEFAULT = SelfcheckShape(tokens=4096, heads=8, kv_rows=4096, topk=2048, d_v=512, d_tail=64)


@dataclass(frozen=True)
class SelfcheckRow:
    """One comparison and its verdict: "PASS", "FAIL", or "-" for an informative row."""

    comparison: str
    cosine: float
    rel_l2: float
    max_abs: float
    verdict: str

    @property
    def passed(self) -> bool:
        return self.verdict != "FAIL"


def default_shape(device: torch.device) -> SelfcheckShape:
    """GLM-5.x TP8 geometry on the GPU; a small shape for the CPU interpreter."""
    return GPU_DEFAULT if device.type == "cuda" else CPU_DEFAULT


def _indices(shape: SelfcheckShape, seed: int) -> torch.Tensor:
    if shape.kv_rows == shape.tokens:  # prefill: causal prefix, then a drifting top-k set
        return drifting_indices([shape.tokens], shape.topk, 0.10, seed=seed)
    return random_distinct_indices(shape.tokens, shape.topk, shape.kv_rows,
                                   torch.Generator().manual_seed(seed), empty_fraction=0.25)


def _row(name: str, actual: torch.Tensor, expected: torch.Tensor, rule: str) -> SelfcheckRow:
    """rule: "gate" (rel-L2 and cosine gates), "bitwise" (must be identical) or "info"."""
    cos, rel = metrics.cosine(actual, expected), metrics.rel_l2(actual, expected)
    if rule == "gate":
        verdict = "PASS" if rel <= REL_L2_GATE and cos >= COSINE_GATE else "FAIL"
    elif rule == "bitwise":
        verdict = "PASS" if torch.equal(actual, expected) else "FAIL"
    else:
        verdict = "-"
    return SelfcheckRow(name, cos, rel, metrics.max_abs(actual, expected), verdict)


def run_selfcheck(shape: SelfcheckShape, device: torch.device, seed: int = 0) -> list[SelfcheckRow]:
    """Run the kernel paths and references on fresh random inputs; return comparison rows."""
    generator = torch.Generator().manual_seed(seed)
    q, kv = random_qkv(shape.tokens, shape.heads, shape.kv_rows, shape.d_v, shape.d_tail, generator, device)
    indices = _indices(shape, seed).to(device)
    scale = (shape.d_v + shape.d_tail) ** -0.5
    ref64 = sparse_mla_reference(q, kv, indices, scale, shape.d_v)
    ref32 = sparse_mla_reference(q, kv, indices, scale, shape.d_v, dtype=torch.float32)
    rows = [_row("reference fp32 vs fp64 (noise floor)", ref32, ref64, "info")]
    first = sparse_mla_prefill(q, kv, indices, scale, shape.d_v,
                               out=poisoned_out(shape.tokens, shape.heads, shape.d_v, device))
    rows.append(_row("triton_sparse_mla vs reference fp64", first, ref64, "gate"))
    again = sparse_mla_prefill(q, kv, indices, scale, shape.d_v)
    rows.append(_row("triton_sparse_mla rerun vs first run (bitwise)", again, first, "bitwise"))
    return rows
