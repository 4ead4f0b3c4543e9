"""Synthetic DSA index sets that look like real prefill, and union statistics.

Kernel convention: indices [T, topk] int32, -1 marks an empty slot. For each sequence of a
batch (independent sequences at consecutive offsets in one KV pool):
- token t < topk selects its whole causal prefix (t + 1 rows), the other slots -1;
- later tokens follow a drifting top-k set: token t keeps the previous token's set except
  `swap_fraction * topk` rows (at most the t + 1 - topk rows outside it), which are replaced
  by rows of [0, t] not already selected.
"""

from __future__ import annotations

import numpy as np
import torch


def _drifting_sequence(seq_len: int, topk: int, swap_fraction: float,
                       rng: np.random.Generator) -> np.ndarray:
    """[seq_len, topk] int32 local row numbers for one sequence (see module docstring)."""
    out = np.full((seq_len, topk), -1, dtype=np.int32)
    prefix_tokens = min(seq_len, topk)
    prefix = np.arange(topk, dtype=np.int32)
    out[:prefix_tokens] = np.where(prefix[None, :] <= np.arange(prefix_tokens)[:, None], prefix[None, :], -1)
    if seq_len <= topk:
        return out
    current = np.arange(topk, dtype=np.int32)
    rng.shuffle(current)
    member = np.zeros(seq_len, dtype=bool)
    member[current] = True
    swaps = int(round(swap_fraction * topk))
    for t in range(topk, seq_len):
        count = min(swaps, t + 1 - topk)  # rows of [0, t] outside the current set
        slots = rng.choice(topk, size=count, replace=False)
        fresh = _draw_non_members(member, t + 1, count, rng)
        member[current[slots]] = False
        current[slots] = fresh
        member[fresh] = True
        out[t] = current
    return out


def _draw_non_members(member: np.ndarray, span: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` distinct rows of [0, span) whose `member` flag is False (rejection sampling)."""
    chosen: list[int] = []
    taken: set[int] = set()
    while len(chosen) < count:
        for row in rng.integers(0, span, size=2 * (count - len(chosen)) + 8):
            row = int(row)
            if not member[row] and row not in taken:
                taken.add(row)
                chosen.append(row)
                if len(chosen) == count:
                    break
    return np.asarray(chosen, dtype=np.int32)


def drifting_indices(seq_lens: list[int], topk: int = 2048, swap_fraction: float = 0.10,
                     seed: int = 0) -> torch.Tensor:
    """Indices [sum(seq_lens), topk] int32 (CPU) for a batch of sequences in one KV pool.

    Sequence b's rows live at offset sum(seq_lens[:b]) in the pool; the KV pool therefore
    needs sum(seq_lens) rows.
    """
    if topk <= 0:
        raise ValueError(f"topk must be positive, got {topk}")
    if not 0.0 <= swap_fraction <= 1.0:
        raise ValueError(f"swap_fraction must be in [0, 1], got {swap_fraction}")
    rng = np.random.default_rng(seed)
    parts, offset = [], 0
    for seq_len in seq_lens:
        local = _drifting_sequence(seq_len, topk, swap_fraction, rng)
        parts.append(np.where(local >= 0, local + offset, -1))
        offset += seq_len
    return torch.from_numpy(np.concatenate(parts).astype(np.int32))
