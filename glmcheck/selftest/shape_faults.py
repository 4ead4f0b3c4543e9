"""Shape-only faults: kernels right on one-shot prefill calls and wrong on an engine's (`--calls serving`).

One-shot, q holds all T tokens, kv the prompt's T rows from row 0, indices name rows in [0, T) with -1 past a token's
valid slots, and no `topk_length`: a kernel may lean on any of that and still pass every one-shot check. An engine's
extend breaks each assumption (`glmcheck.model.engine_pool`). Each fault here leans on one:

- `fault:topk_length_ignored`   reads every slot to top-k: the stale ids an engine leaves past `topk_length` count;
- `fault:int32_wrap`            KV element offsets row x d_qk wrap as an int32 product does, at 2**31 on a GPU (the
                                real fault) and at 2**18 on the CPU (modelled at small scale: a one-shot prompt of up to
                                3276 rows of ref-cpu's 80 values stays below it, the CPU pool of 4096 rows crosses it);
- `fault:prefix_rule_by_call_row`  takes the short-prefix rule from the query's row in the call: row i < top-k reads
                                only its first i + 1 slots (one-shot, token t < top-k selects exactly its t + 1 causal
                                rows; in a later chunk, or behind another request, row i is not position i);
- `fault:causal_by_call_row`    applies causality by the query's row in the call: a slot naming a row past it is
                                dropped (one-shot, rows never pass the token; pool slots do).

Each wraps the kernel under test on a GPU and, on the CPU, the fp32 reference rounded to bf16 (an ideal bf16 kernel;
the interpreter would spend seconds a forward): the fault is the only thing wrong. docs/reliability.md, "Engine-shaped
calls: shape-only faults".
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from glmcheck.kernels import sparse_mla_prefill
from glmcheck.kernels.validate import valid_slot_mask

KernelFn = Callable[..., torch.Tensor]
GPU_WRAP = 2**31  # elements: an int32 row offset wraps here
CPU_WRAP = 2**18  # ... modelled on the CPU


def _base(q: torch.Tensor) -> KernelFn:
    """The kernel a fault wraps: the kernel under test on a GPU, an ideal bf16 kernel on the CPU."""
    if q.is_cuda:
        return sparse_mla_prefill
    from glmcheck.backends.registry import reference_bf16_out

    return reference_bf16_out


def topk_length_ignored(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """Every slot to top-k is read: `topk_length` dropped, so stale ids past it are attended."""
    return _base(q)(q, kv, indices, sm_scale, d_v)


def int32_wrap(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """Row r is read at element offset (r x d_qk) mod WRAP (GPU_WRAP on a GPU, CPU_WRAP on the CPU), as a kernel
    whose row offsets are int32 products reads it."""
    wrap, d_qk = GPU_WRAP if q.is_cuda else CPU_WRAP, kv.shape[-1]
    rows = indices.long()
    wrapped = torch.where((rows >= 0) & (rows * d_qk >= wrap), rows * d_qk % wrap // d_qk, rows)
    return _base(q)(q, kv, wrapped.to(torch.int32), sm_scale, d_v, topk_length=topk_length)


def prefix_rule_by_call_row(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """Query row i of the call with i < top-k reads only its first i + 1 slots (the short-prefix rule applied by the
    row in the call, not the token's position)."""
    topk = indices.shape[1]
    rows = torch.arange(1, indices.shape[0] + 1, device=indices.device).clamp_max(topk)
    lengths = rows if topk_length is None else torch.minimum(rows, topk_length.long().clamp(0, topk))
    return _base(q)(q, kv, indices, sm_scale, d_v, topk_length=lengths.to(torch.int32))


def causal_by_call_row(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """A slot naming a KV row past the query's row in the call is dropped (causality by call-local rows)."""
    valid = valid_slot_mask(indices, kv.shape[0], topk_length)
    rows = torch.arange(indices.shape[0], device=indices.device)[:, None]
    kept = torch.where(valid & (indices.long() <= rows), indices, -1)
    return _base(q)(q, kv, kept, sm_scale, d_v)


SHAPE_FAULTS: dict[str, tuple[KernelFn, str]] = {
    "fault:topk_length_ignored": (topk_length_ignored, "topk_length ignored: stale slots past it are read"),
    "fault:int32_wrap": (int32_wrap, "KV row offsets wrap as int32 (at 2^31 elements; 2^18 on the CPU)"),
    "fault:prefix_rule_by_call_row": (prefix_rule_by_call_row,
                                      "call row i < top-k reads only i + 1 slots (short-prefix rule by call row)"),
    "fault:causal_by_call_row": (causal_by_call_row, "slots naming a row past the query's call row dropped"),
}


def register_shape_faults() -> list[str]:
    """Make the shape-only faults available by name (each once per process); their names."""
    from glmcheck.backends.registry import backend_names, register_backend

    known = set(backend_names())
    for name, (fn, description) in SHAPE_FAULTS.items():
        if name not in known:
            register_backend(name, fn, description + " (wraps the kernel under test; on the CPU an ideal bf16 "
                                                     "kernel)", source="glmcheck.selftest.shape_faults")
    return list(SHAPE_FAULTS)
