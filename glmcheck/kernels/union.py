"""Launchers of the union fast path: the union builds (`union_dedup`; `union_dedup_forced` forces one) and the
Triton union tile.

G adjacent tokens share one deduplicated gather. Legal when the query tile G*H is 16, 32 or 64 rows (tl.dot needs
16; 64 is one Hopper warpgroup MMA tile, the largest whose fp32 accumulator [64, 512] fits): 8 heads G = 2, 4, 8;
16 heads G = 2, 4; 32 heads G = 2. No host sync; the union buffers live only as long as the call that made them.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
import triton

from glmcheck.kernels.runtime import interpreter_active, require_usable_interpreter
from glmcheck.kernels.token_rows import compact_token_rows_kernel
from glmcheck.kernels.union_anchor import union_anchor_kernel
from glmcheck.kernels.union_attention import sparse_mla_union_kernel
from glmcheck.kernels.union_marks import union_marks_kernel
from glmcheck.kernels.union_merge import union_keys_kernel, union_merge_kernel
from glmcheck.kernels.union_search import INT32_MAX, union_build_kernel
from glmcheck.kernels.union_tree import union_pair_merge_kernel
from glmcheck.kernels.validate import (
    PrefillArgs,
    check_indices,
    check_no_duplicates,
    check_topk_length,
    valid_slot_mask,
)

log = logging.getLogger("glmcheck")

UNION_TILE_ROWS = (16, 32, 64)
SUPPORTED_GROUPS = (2, 4, 8)
MAX_GROUP = 8  # ownership bits are uint8
BUILD_BLOCK = 1024  # rows searched per step (H200: 256..2048 within 5%, docs/performance.md)
BUILD_WARPS = 8  # H200: 8 warps 0.84 ms vs 4 warps 0.87 ms (G=2), 1.08 vs 1.28 (G=4)
BUILD_METHODS = ("auto", "marks", "merge", "tree", "anchor", "search")
KEYS_BLOCK = 1024  # slots per program of the key pass
# slots per step of the per-token compaction, 4 warps (docs/performance.md, "Per-token compaction")
TOKEN_ROWS_BLOCK = 512
MERGE_BLOCK = 1024  # sorted keys per step of the merge pass (H200: 1024..4096 within 4 %)
ANCHOR_BLOCK = 256  # partner rows searched per step of the anchor build (H200: 0.339 vs 0.354 ms at 1024)
TREE_BLOCK = 256  # rows per step of a tree-build pair merge (H200: 0.62 vs 0.66 ms at 1024, G=4)
INT16_MAX = 2**15 - 1  # the empty-slot key of int16 merge keys (every valid key sorts below it)
MARKS_BLOCK = 1024  # slots or table bytes per step of the marks build, whatever the top-k (one compiled variant
# for every prompt length: docs/performance.md, "Time to verdict")
# the marks build: 4 warps, at most 16 programs per SM (132 SMs), each building every programs-th group
# (docs/performance.md, "Union builds": 0.62-0.98x the build time of 8 warps and 1056 programs)
MARKS_WARPS = 4
MARKS_PROGRAMS = 2112
MARKS_SCRATCH_BYTES = 64 * 2**20  # the marks table's cap: fewer programs (each one row of num_kv_rows bytes) above it
MARKS_AUTO_MAX_ROWS = MARKS_SCRATCH_BYTES // 256  # "auto" takes marks while >= 256 programs fit under the cap


@dataclass(frozen=True)
class UnionSets:
    """Per group g of G adjacent tokens, n = lengths[g] (lengths [num_groups] int32): rows[g, :n] the distinct
    valid KV rows (int32), bits[g, :n] their ownership masks (uint8, bit i: token i selected it); rest unspecified."""

    rows: torch.Tensor
    bits: torch.Tensor
    lengths: torch.Tensor
    group: int


def union_is_legal(num_heads: int, group: int) -> bool:
    """True when G is a supported group (2, 4 or 8) and the G*H query tile is 16, 32 or 64 rows."""
    return group in SUPPORTED_GROUPS and num_heads * group in UNION_TILE_ROWS


def legal_groups(num_heads: int) -> list[int]:
    """The union group sizes the kernel runs for `num_heads` heads (may be empty)."""
    return [g for g in SUPPORTED_GROUPS if union_is_legal(num_heads, g)]


def union_dedup(indices: torch.Tensor, G: int, topk_length: torch.Tensor | None = None, *,
                num_kv_rows: int | None = None, check_inputs: bool = False) -> UnionSets:
    """Union of the selections of each group of G adjacent tokens (tail tokens T mod G dropped).

    indices [T, topk] (or [T, 1, topk]) int32; empty slots are negative values, values >= num_kv_rows when given,
    and slots at or past topk_length[t]. A token never selects a row twice (`check_inputs=True` verifies it with a
    host sync). The build is chosen for the shape (`choose_build`: the marks build where num_kv_rows <=
    MARKS_AUTO_MAX_ROWS, else anchor, tree or search; docs/performance.md, "Union builds"); every build gives the same
    rows and bits (`union_dedup_forced` chooses one).
    """
    return union_dedup_forced(indices, G, topk_length, num_kv_rows=num_kv_rows, check_inputs=check_inputs)


def union_dedup_forced(indices: torch.Tensor, G: int, topk_length: torch.Tensor | None = None, *,
                       num_kv_rows: int | None = None, check_inputs: bool = False,
                       method: str = "auto") -> UnionSets:
    """`union_dedup` with its build forced, the testing entry point (the self-test's suite, the build bench):
    `method` "search" (per-token sorts, binary searches; any S), "marks" (no sort, one launch: each token ORs its bit
    into a byte table of num_kv_rows rows, one scan compacts it; groups whose tokens select exactly their prefix are
    written directly; needs num_kv_rows), "merge" (one sort of the group's keys row*G + token, copies are
    neighbours; int16 keys while num_kv_rows*G <= 32767; needs a power-of-two G and num_kv_rows*G <= 2**31 - 1),
    "tree" (G = 4, 8: merge at G = 2, then pairwise merges by binary-search ranks), "anchor" (G = 2: only the first
    token sorted, the second's rows searched in it) or "auto" (`union_dedup`'s choice). Same rows and bits."""
    if isinstance(G, bool) or not isinstance(G, int) or not 2 <= G <= MAX_GROUP:
        raise ValueError(f"G must be an int in [2, {MAX_GROUP}], got {G!r}")
    if method not in BUILD_METHODS:
        raise ValueError(f"method must be one of {BUILD_METHODS}, got {method!r}")
    if not isinstance(indices, torch.Tensor):
        raise TypeError(f"indices must be a torch.Tensor, got {type(indices).__name__}")
    indices = check_indices(indices, indices.shape[0] if indices.dim() else 0, indices.device)
    topk_length = check_topk_length(topk_length, indices.shape[0], indices.device)
    if num_kv_rows is not None and num_kv_rows < 0:
        raise ValueError(f"num_kv_rows must be non-negative, got {num_kv_rows}")
    merge_legal = merge_is_legal(G, num_kv_rows)
    if method == "marks" and num_kv_rows is None:
        raise ValueError("method='marks' needs num_kv_rows (the byte table has one entry per KV row)")
    if method == "anchor" and G != 2:
        raise ValueError(f"method='anchor' needs G = 2, got G={G}")
    if method in ("merge", "tree") and not merge_legal:
        raise ValueError(f"method={method!r} needs a power-of-two G and num_kv_rows * G <= {INT32_MAX}, "
                         f"got G={G}, num_kv_rows={num_kv_rows}")
    if check_inputs:
        check_no_duplicates(indices, INT32_MAX if num_kv_rows is None else num_kv_rows, topk_length)
    return build_union_sets(indices, G, topk_length, num_kv_rows, method)


def build_union_sets(indices: torch.Tensor, G: int, topk_length: torch.Tensor | None,
                     num_kv_rows: int | None, method: str = "auto") -> UnionSets:
    """`union_dedup` without its argument checks, for callers that validated them (the prefill path: fewer host
    operations per call): indices [T, topk] int32, topk_length [T] int32 or None, one device, `method` legal."""
    require_usable_interpreter()
    num_groups = indices.shape[0] // G
    topk = indices.shape[1]
    sets = _empty_sets(num_groups, G, topk, indices.device)
    if num_groups == 0 or topk == 0:
        sets.lengths.zero_()
        return sets
    if method == "auto":
        method = choose_build(G, topk, num_kv_rows)
    if method == "marks":
        _build_by_marks(indices, topk_length, num_kv_rows, sets)
    elif method == "search":
        _build_by_search(indices, topk_length, num_kv_rows, sets)
    elif method == "tree" and G > 2:
        _build_by_tree(indices, topk_length, num_kv_rows, sets)
    elif method == "anchor":
        _build_by_anchor(indices, topk_length, num_kv_rows, sets)
    else:
        _build_by_merge(indices, topk_length, num_kv_rows, sets)
    return sets


def _empty_sets(num_groups: int, G: int, topk: int, device: torch.device) -> UnionSets:
    """Output buffers for `num_groups` groups of G tokens. Lengths are left unset: every build kernel writes the
    length of every group it is launched for (a fill launch fewer per buffer)."""
    rows = torch.empty((num_groups, G * topk), dtype=torch.int32, device=device)
    bits = torch.empty((num_groups, G * topk), dtype=torch.uint8, device=device)
    lengths = torch.empty((num_groups,), dtype=torch.int32, device=device)
    return UnionSets(rows, bits, lengths, G)


def choose_build(G: int, topk: int, num_kv_rows: int | None) -> str:
    """The build method "auto" runs (see `union_dedup`): marks wherever its table keeps one row per program
    (num_kv_rows <= MARKS_AUTO_MAX_ROWS), else anchor at G = 2, tree where legal, else search."""
    if num_kv_rows is not None and num_kv_rows <= MARKS_AUTO_MAX_ROWS:
        return "marks"
    if G == 2:
        return "anchor"
    return "tree" if merge_is_legal(G, num_kv_rows) else "search"


def merge_key_dtype(G: int, num_kv_rows: int) -> torch.dtype:
    """Key dtype of the merged-sort build: int16 when every key row*G + token (at most num_kv_rows*G - 1) stays
    below the int16 empty-slot key, else int32."""
    return torch.int16 if num_kv_rows * G <= INT16_MAX else torch.int32


def merge_is_legal(G: int, num_kv_rows: int | None) -> bool:
    """The merged-sort build applies: G a power of two and every key row*G + token fits int32."""
    return G & (G - 1) == 0 and num_kv_rows is not None and num_kv_rows * G <= INT32_MAX


def marks_programs(num_groups: int, num_kv_rows: int) -> int:
    """Programs of the marks build: one per group up to MARKS_PROGRAMS, fewer where their table rows
    (num_kv_rows bytes each) would pass MARKS_SCRATCH_BYTES; at least one."""
    return max(1, min(num_groups, MARKS_PROGRAMS, MARKS_SCRATCH_BYTES // max(1, num_kv_rows)))


def _build_by_marks(indices: torch.Tensor, topk_length: torch.Tensor | None, num_kv_rows: int,
                    sets: UnionSets) -> None:
    """One launch of the marks kernel (`union_marks.py`) over a byte table that lives only inside this call."""
    G, num_groups, topk = sets.group, sets.lengths.shape[0], indices.shape[1]
    programs = marks_programs(num_groups, num_kv_rows)
    pitch = -(-max(1, num_kv_rows) // 16) * 16  # rows 16-byte aligned at any length: one compiled variant, wide stores
    marks = torch.empty((programs, pitch), dtype=torch.uint8, device=indices.device)
    union_marks_kernel[(programs,)](
        indices, indices if topk_length is None else topk_length, marks, sets.rows, sets.bits, sets.lengths,
        num_groups, num_kv_rows, topk, sets.rows.shape[1], indices.stride(0), indices.stride(1), marks.stride(0),
        sets.rows.stride(0), sets.bits.stride(0),
        G=G, G_POW2=triton.next_power_of_2(G), HAS_LENGTH=topk_length is not None,
        BLOCK=MARKS_BLOCK, num_warps=MARKS_WARPS,
    )


def _build_by_search(indices: torch.Tensor, topk_length: torch.Tensor | None,
                     num_kv_rows: int | None, sets: UnionSets) -> None:
    """Per-token sort, then the binary-search kernel (`union_search.py`) fills `sets`."""
    G, num_groups, topk = sets.group, sets.lengths.shape[0], indices.shape[1]
    tokens = num_groups * G
    span = INT32_MAX if num_kv_rows is None else num_kv_rows
    lengths_in = None if topk_length is None else topk_length[:tokens]
    valid = valid_slot_mask(indices[:tokens], span, lengths_in)
    keys = torch.where(valid, indices[:tokens], torch.full_like(indices[:tokens], INT32_MAX))
    sorted_rows = torch.sort(keys, dim=1).values.contiguous()
    counts = valid.sum(dim=1, dtype=torch.int32)
    union_build_kernel[(num_groups,)](
        sorted_rows, counts, sets.rows, sets.bits, sets.lengths,
        sorted_rows.stride(0), sets.rows.stride(0), sets.bits.stride(0),
        G=G, BLOCK=BUILD_BLOCK, SEARCH_STEPS=_search_steps(topk), num_warps=BUILD_WARPS,
    )


def _sorted_keys(indices: torch.Tensor, topk_length: torch.Tensor | None, num_kv_rows: int,
                 G: int) -> tuple[torch.Tensor, int]:
    """Keys row*G + (t mod G) of the valid slots of `indices` [T, topk] (T a multiple of G; any strides), else the
    empty key, sorted per run of G tokens: ([T/G, G*topk] int16 if all fit below INT16_MAX, else int32; empty key)."""
    tokens, topk = indices.shape
    key_dtype = merge_key_dtype(G, num_kv_rows)
    empty_key = INT16_MAX if key_dtype == torch.int16 else INT32_MAX
    keys = torch.empty((tokens, topk), dtype=key_dtype, device=indices.device)
    block = min(KEYS_BLOCK, triton.next_power_of_2(topk))
    union_keys_kernel[(tokens, triton.cdiv(topk, block))](
        indices, indices if topk_length is None else topk_length, keys, num_kv_rows, topk,
        indices.stride(0), indices.stride(1), 1 if topk_length is None else topk_length.stride(0),
        G=G, HAS_LENGTH=topk_length is not None, BLOCK=block, EMPTY=empty_key,
    )
    return torch.sort(keys.view(tokens // G, G * topk), dim=1).values, empty_key


def _build_by_merge(indices: torch.Tensor, topk_length: torch.Tensor | None, num_kv_rows: int, sets: UnionSets) -> None:
    """Keys row*G + token per slot, one torch.sort per group of G*topk keys (int16 or int32), then the merge kernel."""
    G, num_groups, topk = sets.group, sets.lengths.shape[0], indices.shape[1]
    sorted_keys, empty_key = _sorted_keys(indices[:num_groups * G], topk_length, num_kv_rows, G)
    union_merge_kernel[(num_groups,)](
        sorted_keys, sets.rows, sets.bits, sets.lengths,
        G * topk, sorted_keys.stride(0), sets.rows.stride(0), sets.bits.stride(0),
        G=G, LOG2_G=G.bit_length() - 1, BLOCK=MERGE_BLOCK, EMPTY=empty_key, num_warps=BUILD_WARPS,
    )


def _build_by_anchor(indices: torch.Tensor, topk_length: torch.Tensor | None,
                     num_kv_rows: int | None, sets: UnionSets) -> None:
    """G = 2: sort each pair's first token's rows (int16 keys while every row fits below the int16 empty key), then
    the anchor kernel (`union_anchor.py`) fills `sets`."""
    num_pairs, topk = sets.lengths.shape[0], indices.shape[1]
    span = INT32_MAX if num_kv_rows is None else num_kv_rows
    anchor_lengths = None if topk_length is None else topk_length[0:2 * num_pairs:2]  # a view: no copy launch
    sorted_keys, empty_key = _sorted_keys(indices[0:2 * num_pairs:2], anchor_lengths, span, 1)
    union_anchor_kernel[(num_pairs,)](
        sorted_keys, indices, indices if topk_length is None else topk_length, sets.rows, sets.bits, sets.lengths,
        span, topk, sorted_keys.stride(0), indices.stride(0), indices.stride(1),
        sets.rows.stride(0), sets.bits.stride(0),
        HAS_LENGTH=topk_length is not None, BLOCK=min(ANCHOR_BLOCK, triton.next_power_of_2(topk)),
        SEARCH_STEPS=_search_steps(topk), EMPTY=empty_key, num_warps=BUILD_WARPS,
    )


def _build_by_tree(indices: torch.Tensor, topk_length: torch.Tensor | None, num_kv_rows: int, sets: UnionSets) -> None:
    """Merge build at G = 2, then pairwise merges of neighbouring unions up to sets.group (`union_tree.py`); the
    intermediate levels live only inside this call."""
    G, num_groups, topk = sets.group, sets.lengths.shape[0], indices.shape[1]
    tokens = num_groups * G
    level = _empty_sets(tokens // 2, 2, topk, indices.device)
    _build_by_merge(indices[:tokens], None if topk_length is None else topk_length[:tokens], num_kv_rows, level)
    while level.group < G:
        half = level.group
        merged = sets if 2 * half == G else _empty_sets(level.lengths.shape[0] // 2, 2 * half, topk, indices.device)
        width_in = level.rows.shape[1]
        union_pair_merge_kernel[(merged.lengths.shape[0],)](
            level.rows, level.bits, level.lengths, merged.rows, merged.bits, merged.lengths,
            merged.rows.shape[1], level.rows.stride(0), level.bits.stride(0),
            merged.rows.stride(0), merged.bits.stride(0),
            HALF=half, BLOCK=min(TREE_BLOCK, triton.next_power_of_2(width_in)), SEARCH_STEPS=_search_steps(width_in),
            num_warps=BUILD_WARPS,
        )
        level = merged


def _search_steps(width: int) -> int:
    """Binary-search steps that resolve a lower_bound over `width` sorted rows."""
    return max(1, math.ceil(math.log2(width + 1)))


def token_row_sets(indices: torch.Tensor, topk_length: torch.Tensor | None, num_kv_rows: int) -> UnionSets:
    """Each token's valid rows compacted, as sets of one token (group 1, bit 1) for the ping-pong tile on the
    per-token path (from 17 heads, a 64-head slice per program); indices [T, topk] int32, topk_length [T] int32 or
    None (checked by the caller)."""
    tokens, topk = indices.shape
    sets = _empty_sets(tokens, 1, topk, indices.device)
    if tokens == 0 or topk == 0:
        sets.lengths.zero_()
        return sets
    compact_token_rows_kernel[(tokens,)](
        indices, indices if topk_length is None else topk_length, sets.rows, sets.bits, sets.lengths,
        num_kv_rows, topk, indices.stride(0), indices.stride(1), sets.rows.stride(0), sets.bits.stride(0),
        HAS_LENGTH=topk_length is not None, BLOCK=min(TOKEN_ROWS_BLOCK, triton.next_power_of_2(topk)),
    )
    return sets


def launch_union_attention(args: PrefillArgs, sets: UnionSets, out: torch.Tensor, tile,
                           kv_int64: bool, qk_scale_log2: float):
    """Launch the union attention for the first len(sets.lengths) * G tokens."""
    q, kv = args.q, args.kv
    return sparse_mla_union_kernel[(sets.lengths.shape[0],)](
        q, kv, sets.rows, sets.bits, sets.lengths, out,
        q.stride(0), q.stride(1), q.stride(2), kv.stride(0), kv.stride(1), sets.rows.stride(0), sets.bits.stride(0),
        out.stride(0), out.stride(1), out.stride(2), qk_scale_log2,
        H=args.num_heads, G=sets.group, D_V=args.d_v, D_TAIL=args.d_tail, TAIL_PAD=max(16, args.d_tail),
        BLOCK_N=tile.block_n, KV_INT64=kv_int64, UPCAST=interpreter_active(),
        num_warps=tile.num_warps, num_stages=tile.num_stages,
    )


_logged_fallbacks: set[tuple[int, int]] = set()


def log_fallback_once(num_heads: int, group: int, reason: str) -> None:
    """Debug-level note (once per heads/group) that a union request ran the per-token path."""
    if (num_heads, group) not in _logged_fallbacks:
        _logged_fallbacks.add((num_heads, group))
        log.debug("glmcheck: union=%d with %d heads runs the per-token path (%s)", group, num_heads, reason)
