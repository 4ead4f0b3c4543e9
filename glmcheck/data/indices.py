"""Synthetic DSA index sets that look like real prefill, and union statistics.

Kernel convention: indices [T, topk] int32, -1 marks an empty slot. For each sequence of a
batch (independent sequences at consecutive offsets in one KV pool):
- token t < topk selects its whole causal prefix (t + 1 rows), the other slots -1;
- later tokens follow a drifting top-k set: token t keeps the previous token's set except
  `swap_fraction * topk` rows (at most the t + 1 - topk rows outside it), which are replaced
  by rows of [0, t] not already selected (`drifting_indices`, a simple generator).

`calibrated_indices` instead follows a score model fitted to captured GLM-5.1 prefill traces
(CAPTURED_TARGETS, DriftParams; docs/indices.md), `uniform_indices` picks uniform random rows
for contrast, and `union_statistics` measures valid rows per token and union-of-G ratios of any
index tensor.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass

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
    swaps = round(swap_fraction * topk)
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


# ---------------------------------------------------------------------------------------------
# Calibrated generator: a score model fitted to captured GLM-5.1 prefill union statistics.
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CaptureTarget:
    """One published capture: its batch shape and measured statistics (topk 2048)."""

    name: str
    seq_lens: tuple[int, ...]
    valid_rows_per_token: int
    union_ratio: dict[int, float]


CAPTURED_TARGETS: tuple[CaptureTarget, ...] = (
    CaptureTarget("bs1 x 2048", (2048,), 1024, {2: 1.00, 4: 1.01}),
    CaptureTarget("bs1 x 4096", (4096,), 1536, {2: 1.05, 4: 1.09}),
    CaptureTarget("bs1 x 8192", (8192,), 1792, {2: 1.12, 4: 1.23}),
    CaptureTarget("bs2 x 4096", (4096, 4096), 1536, {2: 1.05, 4: 1.09}),
    CaptureTarget("bs4 x 2048", (2048,) * 4, 1024, {2: 1.00, 4: 1.01}),
)
"""Union statistics measured on captured GLM-5.1 prefill traces (see docs/indices.md)."""


@dataclass(frozen=True)
class DriftParams:
    """Score model of `calibrated_indices`; the defaults are fitted by scripts/fit_indices.py.

    Token t of a sequence scores every visible row r <= t as
    `base[r] + noise * (max(t + 1, topk) / topk) ** noise_growth * eps[t, r]` (base, eps i.i.d.
    N(0, 1)) and selects the topk best. Rows r < sink_rows and the local_rows most recent rows
    (t - local_rows < r <= t) are pinned: they always rank first.
    """

    noise: float = 0.254
    noise_growth: float = 0.168
    sink_rows: int = 4
    local_rows: int = 64

    def __post_init__(self) -> None:
        if not (isinstance(self.noise, numbers.Real) and self.noise >= 0):
            raise ValueError(f"noise must be a number >= 0, got {self.noise!r}")
        if not isinstance(self.noise_growth, numbers.Real):
            raise ValueError(f"noise_growth must be a number, got {self.noise_growth!r}")
        for name in ("sink_rows", "local_rows"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 0):
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")


_SCORE_BUDGET = 1 << 22  # score-matrix elements per chunk of tokens

ScoreFn = Callable[[int, int, torch.Generator], torch.Tensor]


def _check_topk(topk: int) -> int:
    if isinstance(topk, bool) or not isinstance(topk, int) or topk <= 0:
        raise ValueError(f"topk must be a positive int, got {topk!r}")
    return topk


def _check_seq_lens(seq_lens: list[int], total: int | None = None) -> list[int]:
    """Non-empty list of positive ints (summing to `total` when given); else ValueError."""
    if seq_lens is None or len(seq_lens) == 0:
        raise ValueError("seq_lens must be a non-empty list of positive ints")
    lens = list(seq_lens)
    if any(isinstance(n, bool) or not isinstance(n, int) or n <= 0 for n in lens):
        raise ValueError(f"seq_lens must hold positive ints, got {lens}")
    if total is not None and sum(lens) != total:
        raise ValueError(f"seq_lens must sum to the {total} rows of indices, got sum {sum(lens)}")
    return lens


def _ranked_rows(seq_len: int, topk: int, scores: ScoreFn, gen: torch.Generator) -> torch.Tensor:
    """[seq_len, topk] int32 local rows: per token the best-scoring visible rows, -1 padded last.

    `scores(t0, t1, gen)` returns [t1 - t0, t1] scores of rows 0..t1-1 for tokens t0..t1-1;
    rows after the token are masked here, so token t gets min(t + 1, topk) valid slots in
    descending score order followed by -1s.
    """
    out = torch.full((seq_len, topk), -1, dtype=torch.int32)
    t0 = 0
    while t0 < seq_len:
        t1 = min(seq_len, t0 + max(1, _SCORE_BUDGET // max(t0 + 1, topk)))
        tok = torch.arange(t0, t1)[:, None]
        score = scores(t0, t1, gen).masked_fill(torch.arange(t1)[None, :] > tok, float("-inf"))
        k = min(topk, t1)
        value, row = torch.topk(score, k, dim=1)
        out[t0:t1, :k] = row.to(torch.int32).masked_fill(value == float("-inf"), -1)
        t0 = t1
    return out


def _drift_scores(seq_len: int, topk: int, params: DriftParams, gen: torch.Generator) -> ScoreFn:
    """Score function of the DriftParams model for one sequence (base scores drawn now)."""
    base = torch.randn(seq_len, generator=gen)

    def scores(t0: int, t1: int, g: torch.Generator) -> torch.Tensor:
        tok = torch.arange(t0, t1, dtype=torch.float32)[:, None]
        sigma = params.noise * (torch.clamp(tok + 1, min=topk) / topk) ** params.noise_growth
        score = base[None, :t1] + sigma * torch.randn(t1 - t0, t1, generator=g)
        row = torch.arange(t1, dtype=torch.float32)[None, :]
        pinned = (row < params.sink_rows) | (tok - row < params.local_rows)
        return score + pinned * (64.0 * (1.0 + sigma))  # above any unpinned score

    return scores


def _uniform_scores(t0: int, t1: int, gen: torch.Generator) -> torch.Tensor:
    """Fresh uniform scores per token: its topk rows are a uniform random subset, in random order."""
    return torch.rand(t1 - t0, t1, generator=gen)


def _batched(seq_lens: list[int], topk: int, seed: int,
             make_scores: Callable[[int, torch.Generator], ScoreFn]) -> torch.Tensor:
    """Concatenate per-sequence ranked rows, shifting sequence b by sum(seq_lens[:b])."""
    gen = torch.Generator().manual_seed(seed)
    parts, offset = [], 0
    for seq_len in seq_lens:
        local = _ranked_rows(seq_len, topk, make_scores(seq_len, gen), gen)
        parts.append(torch.where(local >= 0, local + offset, local))
        offset += seq_len
    return torch.cat(parts)


def calibrated_indices(seq_lens: list[int], topk: int = 2048, seed: int = 0,
                       params: DriftParams | None = None) -> torch.Tensor:
    """Indices [sum(seq_lens), topk] int32 (CPU) whose union statistics match CAPTURED_TARGETS.

    Causal per sequence, no duplicate rows within a token, prefix rule for t < topk (the t + 1
    valid slots first, -1 padding last), rows in descending model-score order. Sequence b's
    rows are offset by sum(seq_lens[:b]). Deterministic in `seed`.
    """
    lens, topk = _check_seq_lens(seq_lens), _check_topk(topk)
    params = DriftParams() if params is None else params
    if not isinstance(params, DriftParams):
        raise ValueError(f"params must be a DriftParams or None, got {type(params).__name__}")
    return _batched(lens, topk, seed, lambda n, gen: _drift_scores(n, topk, params, gen))


def uniform_indices(seq_lens: list[int], topk: int = 2048, seed: int = 0) -> torch.Tensor:
    """Indices [sum(seq_lens), topk] int32 (CPU): token t >= topk picks topk distinct uniform rows.

    Same layout and prefix rule as calibrated_indices (valid slots in random order, -1 last);
    neighbouring tokens share only chance overlap, so unions are large (a contrast case).
    """
    lens, topk = _check_seq_lens(seq_lens), _check_topk(topk)
    return _batched(lens, topk, seed, lambda n, gen: _uniform_scores)


# ---------------------------------------------------------------------------------------------
# Union statistics of any index tensor.
# ---------------------------------------------------------------------------------------------

_BITMAP_BUDGET = 1 << 26  # bytes of one chunk's row bitmap
_SORT_BUDGET = 1 << 24  # elements of one chunk that is sorted instead
_BITMAP_WIDTH_PER_SLOT = 16  # bitmap when a group's row span <= this many times its slots


def _empty_marked(indices: torch.Tensor, num_kv_rows: int | None) -> torch.Tensor:
    """indices with every empty slot (< 0, or >= num_kv_rows when given) set to -1."""
    if num_kv_rows is None:
        return indices.clamp_min(-1)
    keep = (indices >= 0) & (indices < num_kv_rows)
    return torch.where(keep, indices, torch.full_like(indices, -1))


def _group_tokens(seq_lens: list[int], group: int) -> torch.Tensor:
    """Token ids of all complete groups of `group` adjacent tokens within each sequence."""
    starts = [0] + list(itertools.accumulate(seq_lens))[:-1]
    spans = [torch.arange(s, s + (n // group) * group) for s, n in zip(starts, seq_lens)]
    return torch.cat(spans)


def _row_spans(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of `rows` (-1 = empty): lowest and highest valid value (int64; max, -1 if none)."""
    top = torch.iinfo(torch.int64).max
    lo = torch.where(rows >= 0, rows, torch.iinfo(rows.dtype).max).amin(1).long()
    hi = rows.amax(1).long()
    return torch.where(hi >= 0, lo, top), hi


def _distinct_by_bitmap(block: torch.Tensor, lo: torch.Tensor, width: int) -> int:
    """Distinct valid rows per group row of `block`, summed, via a [groups, 1 + width] bitmap.

    Column 0 collects the empty slots; valid row v of group i goes to column 1 + v - lo[i].
    """
    cols = block.long().sub_(lo[:, None] - 1).clamp_min_(0)
    seen = torch.zeros(block.shape[0], width + 1, dtype=torch.bool).scatter_(1, cols, True)
    return int(torch.count_nonzero(seen)) - int(torch.count_nonzero(seen[:, 0]))


def _distinct_by_sort(block: torch.Tensor) -> int:
    """Distinct valid rows per group row of `block`, summed, by sorting each row."""
    rows = torch.sort(block, dim=1).values
    fresh = torch.ones_like(rows, dtype=torch.bool)
    fresh[:, 1:] = rows[:, 1:] != rows[:, :-1]
    return int(torch.count_nonzero(fresh & (rows >= 0)))


def _union_total(groups: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> int:
    """Sum over rows of `groups` [n, G * topk] (-1 = empty) of the number of distinct valid rows.

    lo, hi [n]: each group's lowest and highest valid row (hi < 0: no valid row).
    """
    lo = torch.where(hi >= 0, lo, torch.zeros_like(lo))
    width = int((hi - lo).max()) + 1 if groups.shape[0] else 0
    if width <= 0:
        return 0
    bitmap = width <= _BITMAP_WIDTH_PER_SLOT * groups.shape[1]  # else a sort is cheaper
    step = max(1, (_BITMAP_BUDGET // (width + 1)) if bitmap else _SORT_BUDGET // groups.shape[1])
    total = 0
    for a in range(0, groups.shape[0], step):
        chunk = groups[a:a + step]
        total += _distinct_by_bitmap(chunk, lo[a:a + step], width) if bitmap else _distinct_by_sort(chunk)
    return total


def union_statistics(indices: torch.Tensor, group_sizes: Iterable[int] = (2, 4),
                     seq_lens: list[int] | None = None, num_kv_rows: int | None = None) -> dict:
    """Valid rows per token and union ratios of an index tensor [T, topk] (any integer dtype).

    Empty slots: < 0, or >= num_kv_rows when given. valid_rows_per_token = mean valid slots
    per token (a duplicated row counts per slot). union_ratio[G] = sum over groups of G adjacent
    tokens of |union of their valid rows| / (sum over those tokens of valid slots / G); groups
    are formed within each sequence of seq_lens (default: one sequence), an incomplete last
    group is dropped; a row duplicated within a group counts once in its union. NaN when no
    group has a valid slot. Returns {"tokens": T, "valid_rows_per_token": float,
    "union_ratio": {G: float}}.
    """
    if not isinstance(indices, torch.Tensor):
        raise TypeError(f"indices must be a torch.Tensor, got {type(indices).__name__}")
    if indices.dim() != 2 or indices.shape[0] == 0 or indices.shape[1] == 0:
        raise ValueError(f"indices must have shape [T, topk] with T, topk >= 1, got {tuple(indices.shape)}")
    if indices.dtype.is_floating_point or indices.dtype.is_complex or indices.dtype == torch.bool:
        raise TypeError(f"indices must have an integer dtype, got {indices.dtype}")
    if num_kv_rows is not None and (isinstance(num_kv_rows, bool) or not isinstance(num_kv_rows, int)
                                    or num_kv_rows <= 0):
        raise ValueError(f"num_kv_rows must be a positive int or None, got {num_kv_rows!r}")
    tokens = indices.shape[0]
    lens = _check_seq_lens([tokens] if seq_lens is None else seq_lens, total=tokens)
    sizes = list(group_sizes)
    if any(isinstance(g, bool) or not isinstance(g, int) or g < 2 for g in sizes):
        raise ValueError(f"group_sizes must hold ints >= 2, got {sizes}")
    rows = _empty_marked(indices.cpu(), num_kv_rows)
    per_token = (rows >= 0).sum(dim=1, dtype=torch.int64)
    lo, hi = _row_spans(rows)
    ratios = {}
    for g in sizes:
        ids = _group_tokens(lens, g)
        mean_size = float(per_token[ids].sum()) / g
        union = _union_total(rows[ids].reshape(-1, g * rows.shape[1]),
                             lo[ids].reshape(-1, g).amin(1), hi[ids].reshape(-1, g).amax(1))
        ratios[g] = union / mean_size if mean_size > 0 else float("nan")
    return {"tokens": tokens, "valid_rows_per_token": float(per_token.sum()) / tokens,
            "union_ratio": ratios}


def calibrated_selector(seed: int = 0) -> Callable[[int, int, int, int, torch.device], torch.Tensor]:
    """A `glmcheck.model.use_backend` selector for timing runs: full layer l's top-k [B, S, K] drawn by
    `calibrated_indices` ([S] * B, K, seed + l) in the indexer's convention: positions within each
    sequence, an empty slot of token t holding the future position S - 1 (> t, so masked as the indexer's
    own padding is), int32 on the model's device; each draw is kept for reuse."""
    drawn: dict[tuple, torch.Tensor] = {}

    def select(layer: int, batch: int, seq: int, topk: int, device: torch.device) -> torch.Tensor:
        key = (layer, batch, seq, topk, str(device))
        if key not in drawn:
            pooled = calibrated_indices([seq] * batch, topk, seed=seed + layer).view(batch, seq, topk)
            offset = (torch.arange(batch, dtype=torch.int32) * seq).view(batch, 1, 1)
            drawn[key] = torch.where(pooled >= 0, pooled - offset, seq - 1).to(torch.int32).to(device)
        return drawn[key]

    return select
