"""The kernel at one shape on random inputs against the fp64 reference (`glmcheck kernel-check`, formerly
`selfcheck`; `glmcheck.evaluate.kernel_checks.kernel_check` makes its report).

Rows compare the kernel with the fp64 reference beside the fp32 reference (the noise floor of a careful
implementation) and a rerun of the kernel (which must be bitwise identical). Unlike `glmcheck selftest` (the small
accuracy suite on the kernels and on planted faults: does the suite catch a fault?), this asks whether the kernel
computes right at a shape of the user's choosing, by default GLM-5.x's on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.checks import metrics
from glmcheck.data.indices import drifting_indices
from glmcheck.data.inputs import poisoned_out, random_distinct_indices, random_qkv
from glmcheck.kernels import sparse_mla_prefill
from glmcheck.kernels.runtime import INTERP_BLOCK_S, interpreted_seconds
from glmcheck.process.wording import flag

REL_L2_GATE = 3e-3
COSINE_GATE = 0.99999


@dataclass(frozen=True)
class KernelShape:
    """Problem size: tokens, heads, KV rows, top-k, value dim and rope-tail dim."""

    tokens: int
    heads: int
    kv_rows: int
    topk: int
    d_v: int
    d_tail: int


CPU_DEFAULT = KernelShape(tokens=64, heads=8, kv_rows=256, topk=128, d_v=64, d_tail=16)
GPU_DEFAULT = KernelShape(tokens=4096, heads=8, kv_rows=4096, topk=2048, d_v=512, d_tail=64)

# On the CPU the kernel runs in Triton's interpreter: a kernel check takes about its blocks of 16 selected rows (tokens
# x ceil(topk / 16)) at the interpreter's fitted speed (`glmcheck.kernels.runtime.interpreted_seconds`). Shapes
# estimated above CPU_LIMIT_S are refused.
CPU_LIMIT_S = 600


@dataclass(frozen=True)
class KernelCheckRow:
    """One comparison, the rule it is judged by ("gate": rel-L2 <= REL_L2_GATE and cosine >= COSINE_GATE,
    "bitwise": identical, "info": not judged) and its verdict: "PASS", "FAIL", or "-" for an informative row."""

    comparison: str
    cosine: float
    rel_l2: float
    max_abs: float
    verdict: str
    rule: str = "info"

    @property
    def passed(self) -> bool:
        return self.verdict != "FAIL"


def default_shape(device: torch.device) -> KernelShape:
    """GLM-5.x TP8 geometry on the GPU; a small shape for the CPU interpreter."""
    return GPU_DEFAULT if device.type == "cuda" else CPU_DEFAULT


def cpu_seconds(shape: KernelShape) -> float:
    """Estimated seconds of a kernel check of `shape` on the CPU (Triton interpreter; see CPU_LIMIT_S)."""
    return interpreted_seconds(shape.tokens * -(-shape.topk // 16), shape.heads, shape.d_v + shape.d_tail)


def memory_bytes(shape: KernelShape) -> tuple[int, int]:
    """(host bytes, device bytes) a kernel check of `shape` needs, from its tensors' shapes: the inputs drawn
    on the host in fp32 (and, for a KV pool that is not the prefill's, a [T, S] sort key per token), then
    on the device the bf16 inputs, int32 indices, the fp64 / fp32 references, the kernel's two outputs,
    the metrics' fp64 copies and the references' gathered-row chunks (3 x 256 MiB)."""
    t, h, s, k, dv = shape.tokens, shape.heads, shape.kv_rows, shape.topk, shape.d_v
    d_qk = dv + shape.d_tail
    host = t * h * d_qk * (4 + 2) + s * d_qk * (4 + 2)
    host += t * k * 8 if s == t else t * s * (4 + 8) + t * k * (4 + 4 + 1)
    device = t * h * d_qk * 2 + s * d_qk * 2 + t * k * (4 + 2 + 8) + t * h * dv * (8 + 4 + 2 + 2 + 2 * 8)
    return host, device + 3 * 256 * 2**20


def check_shape(shape: KernelShape, device: torch.device | str) -> None:
    """ValueError naming the argument (`tokens`, `heads`, ...; the CLI's flags: `glmcheck.process.wording`) when the
    kernel cannot take `shape`, or when it would not fit the device's memory (`glmcheck.model.memory.check_memory`:
    RAM, a GPU's free memory) or, on the CPU, run within CPU_LIMIT_S; before anything is allocated."""
    from glmcheck.kernels.validate import MAX_HEADS
    from glmcheck.model.memory import check_memory

    device = torch.device(device)
    if shape.heads > MAX_HEADS:
        raise ValueError(f"{flag('heads')} {shape.heads}: the kernel takes 1..{MAX_HEADS} heads")
    if shape.d_v < 16 or shape.d_v & (shape.d_v - 1):
        raise ValueError(f"{flag('d_v')} {shape.d_v}: d_v must be a power of two >= 16")
    if shape.d_tail < 0 or shape.d_tail & (shape.d_tail - 1):
        raise ValueError(f"{flag('d_tail')} {shape.d_tail}: the rope tail must be 0 or a power of two")
    if shape.kv_rows != shape.tokens and shape.topk > shape.kv_rows:
        raise ValueError(f"{flag('topk')} {shape.topk} exceeds {flag('kv_rows')} {shape.kv_rows} (a token selects "
                         f"distinct rows)")
    label = " ".join(f"{flag(name)} {getattr(shape, name)}" for name in ("tokens", "heads", "kv_rows", "topk"))
    label += f" (d_qk {shape.d_v + shape.d_tail})"
    host, on_device = memory_bytes(shape)
    if device.type == "cuda":
        check_memory(host, "cpu", label, "inputs drawn on the host")
        check_memory(on_device, device, label, "inputs, references, outputs on the GPU")
        return
    seconds = cpu_seconds(shape)
    if seconds > CPU_LIMIT_S:
        took = f"{seconds / 3600:,.1f} hours" if seconds >= 3600 else f"{seconds / 60:.0f} minutes"
        raise ValueError(f"{label} would take about {took} on the CPU (Triton interpreter, ~{INTERP_BLOCK_S * 1e3:.0f} "
                         f"ms per token and 16 selected rows); the CPU limit is {CPU_LIMIT_S // 60} minutes: use a "
                         f"smaller shape or a GPU ({flag('device')} cuda)")
    check_memory(host + on_device, device, label, "inputs, references, outputs")


def _indices(shape: KernelShape, seed: int) -> torch.Tensor:
    if shape.kv_rows == shape.tokens:  # prefill: causal prefix, then a drifting top-k set
        return drifting_indices([shape.tokens], shape.topk, 0.10, seed=seed)
    return random_distinct_indices(shape.tokens, shape.topk, shape.kv_rows,
                                   torch.Generator().manual_seed(seed), empty_fraction=0.25)


def _row(name: str, actual: torch.Tensor, expected: torch.Tensor, rule: str) -> KernelCheckRow:
    """rule: "gate" (rel-L2 and cosine gates), "bitwise" (must be identical) or "info"."""
    cos, rel = metrics.cosine(actual, expected), metrics.rel_l2(actual, expected)
    if rule == "gate":
        verdict = "PASS" if rel <= REL_L2_GATE and cos >= COSINE_GATE else "FAIL"
    elif rule == "bitwise":
        verdict = "PASS" if torch.equal(actual, expected) else "FAIL"
    else:
        verdict = "-"
    return KernelCheckRow(name, cos, rel, metrics.max_abs(actual, expected), verdict, rule)


def run_kernel_check(shape: KernelShape, device: torch.device, seed: int = 0) -> list[KernelCheckRow]:
    """Run the kernel paths and references on fresh random inputs; return comparison rows.
    ValueError before anything is allocated for a shape `check_shape` refuses."""
    check_shape(shape, device)
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
