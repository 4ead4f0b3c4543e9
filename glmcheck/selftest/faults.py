"""Planted faults at realistic sizes, as backends wrapping the kernel under test.

Each takes the kernel signature and returns what a subtly broken kernel would: the verdict's
detection rate is measured on them (`glmcheck.selftest.rates`). Sizes are those a real bug
gives: a scale off by 0.3 %, a softmax scale off by 0.1 %, one token in 64 or in 100.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from glmcheck.kernels import sparse_mla_prefill
from glmcheck.kernels.validate import valid_slot_mask

KernelFn = Callable[..., torch.Tensor]


def output_scaled(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """The output multiplied by 1.003 (a wrong normaliser, a stray constant)."""
    out = sparse_mla_prefill(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
    return (out.float() * 1.003).to(out.dtype)


def softmax_scale_off(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """The softmax scale multiplied by 1.001 (log2(e) folded in with too few digits)."""
    return sparse_mla_prefill(q, kv, indices, sm_scale * 1.001, d_v, topk_length=topk_length)


def rope_tail_dropped(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """Scores without the rope part of the dot product (q[..., d_v:] ignored)."""
    q = q.clone()
    q[..., d_v:] = 0
    return sparse_mla_prefill(q, kv, indices, sm_scale, d_v, topk_length=topk_length)


def neighbour_rows(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """One token in 64 (tokens 0, 64, ...) attends over the next token's selection."""
    wrong = indices.clone()
    tokens = torch.arange(0, indices.shape[0] - 1, 64, device=indices.device)
    wrong[tokens] = indices[tokens + 1]
    lengths = None
    if topk_length is not None:
        lengths = topk_length.clone()
        lengths[tokens] = topk_length[tokens + 1]
    return sparse_mla_prefill(q, kv, wrong, sm_scale, d_v, topk_length=lengths)


def empty_slot_as_row0(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """In one token of 100 (tokens 1, 101, ... that have an empty slot) the first empty slot reads
    KV row 0 instead of nothing."""
    valid = valid_slot_mask(indices, kv.shape[0], topk_length)
    wrong = torch.where(valid, indices, -1)
    for token in range(1, indices.shape[0], 100):
        empty = (~valid[token]).nonzero()
        if len(empty):
            wrong[token, empty[0, 0]] = 0
    return sparse_mla_prefill(q, kv, wrong, sm_scale, d_v)


def _last_valid_slot(valid: torch.Tensor) -> torch.Tensor:
    """[T] the last valid slot of each token of valid [T, K] (-1 for a token with none)."""
    slots = torch.arange(valid.shape[1], device=valid.device)
    return torch.where(valid, slots, -1).amax(dim=1)


def last_slot_dropped(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """Every token's last valid slot is ignored (a slot count off by one: `range(n - 1)`); a token with one valid
    slot (token 0 selects only itself) attends to nothing."""
    valid = valid_slot_mask(indices, kv.shape[0], topk_length)
    wrong = torch.where(valid, indices, -1)
    last = _last_valid_slot(valid)
    tokens = (last >= 0).nonzero().flatten()
    wrong[tokens, last[tokens]] = -1
    return sparse_mla_prefill(q, kv, wrong, sm_scale, d_v)


def slots_dropped_past(start: int, every: int = 4) -> KernelFn:
    """A fault that starts at position `start`: tokens t >= start ignore every `every`-th slot (a quarter by
    default), as a kernel whose second code path (long prompts, a second tile, a split) loses part of the range."""

    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
        valid = valid_slot_mask(indices, kv.shape[0], topk_length)
        wrong = torch.where(valid, indices, -1)
        late = wrong[start:]
        late[:, every - 1::every] = -1
        return sparse_mla_prefill(q, kv, wrong, sm_scale, d_v)

    kernel.__doc__ = f"tokens from position {start} on ignore every {every}th slot"
    return kernel


def future_row(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """One token in 64 (tokens 0, 64, ...) reads the next position's KV row in place of its last selected row (a
    causal bound off by one: <= t + 1)."""
    valid = valid_slot_mask(indices, kv.shape[0], topk_length)
    wrong = torch.where(valid, indices, -1)
    last = _last_valid_slot(valid)
    tokens = torch.arange(0, min(indices.shape[0], kv.shape[0] - 1), 64, device=indices.device)
    tokens = tokens[last[tokens] >= 0]
    wrong[tokens, last[tokens]] = (tokens + 1).to(wrong.dtype)
    return sparse_mla_prefill(q, kv, wrong, sm_scale, d_v)


def duplicate_row(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """One token in 32 (tokens 0, 32, ...) with two or more valid slots reads its first selected row again in
    place of its last (a deduplication that keeps a row twice: that row's weight doubles, another's is lost)."""
    valid = valid_slot_mask(indices, kv.shape[0], topk_length)
    wrong = torch.where(valid, indices, -1)
    first = torch.where(valid, torch.arange(valid.shape[1], device=valid.device), valid.shape[1]).amin(dim=1)
    last = _last_valid_slot(valid)
    tokens = torch.arange(0, indices.shape[0], 32, device=indices.device)
    tokens = tokens[last[tokens] > first[tokens].clamp_max(valid.shape[1] - 1)]
    wrong[tokens, last[tokens]] = wrong[tokens, first[tokens]]
    return sparse_mla_prefill(q, kv, wrong, sm_scale, d_v)


def heads_swapped(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """The outputs of heads 0 and 1 written to each other's place (a head index off in the write-out)."""
    out = sparse_mla_prefill(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
    if out.shape[1] < 2:
        return out
    return out[:, [1, 0, *range(2, out.shape[1])]].contiguous()


FAULTS: dict[str, tuple[KernelFn, str]] = {
    "fault:output_x1.003": (output_scaled, "output x 1.003"),
    "fault:sm_scale_x1.001": (softmax_scale_off, "softmax scale x 1.001"),
    "fault:rope_dropped": (rope_tail_dropped, "the rope tail of the scores dropped"),
    "fault:neighbour_1in64": (neighbour_rows, "one token in 64 reads its neighbour's rows"),
    "fault:empty_row0_1in100": (empty_slot_as_row0, "an empty slot read as row 0 in one token of 100"),
}

# Structural faults (docs/reliability.md, "All-position logits and the one-forward sweep"): a slot count off by one, a
# row from the future, a row kept twice, two heads swapped, and one that starts past a position (`late_fault`: its
# position is the check's, so it is made per prompt length).
STRUCTURAL_FAULTS: dict[str, tuple[KernelFn, str]] = {
    "fault:last_slot_dropped": (last_slot_dropped, "every token's last valid slot ignored (slot count off by one)"),
    "fault:future_row_1in64": (future_row, "one token in 64 reads the next position's row in place of its last"),
    "fault:duplicate_row_1in32": (duplicate_row, "one token in 32 reads its first row again in place of its last"),
    "fault:heads_swapped": (heads_swapped, "the outputs of heads 0 and 1 swapped"),
}


def late_fault(tokens: int, start: int | None = None) -> tuple[str, KernelFn, str]:
    """(name, kernel, description) of the fault that starts at position `start` of a `tokens`-long prompt (default
    3 * tokens // 4): tokens from there on ignore a quarter of their slots."""
    start = 3 * tokens // 4 if start is None else start
    return (f"fault:quarter_dropped_from{start}", slots_dropped_past(start),
            f"tokens from position {start} on ignore every 4th slot")
