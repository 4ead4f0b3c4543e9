"""The noise band's legitimate variants: ideal flash-style bf16-output sparse-MLA kernels in torch.

What separates two correct flash kernels is where they round the probabilities P to bf16 before
the P.V MMA: against the running max of the KV blocks seen so far, so block size and processing
order change the rounding. Each variant here is one such kernel, exact in every other respect.

Per token (vectorised over tokens and heads; the Python loop runs over blocks only), the index
slots are cut into blocks of `block` consecutive slots, processed first to last or last to first.
Per block, with fp32 scores s = q.k * sm_scale over the block's valid slots (masked slots -inf):

    m' = max(m, max s)      P = bf16(exp(s - m'))      a = exp(m - m')
    acc = acc * a + P @ V   (fp32 accumulation)        l = l * a + sum(p)

where `p` is the fp32 probability (`sum_rounded=False`, as the Triton flash tutorial and
FlashAttention-2/3 sum the row before the cast) or the rounded P fed to the MMA
(`sum_rounded=True`: the normaliser then matches the weights exactly); kernels differ, so both are
legitimate. Output bf16(acc / l). A token with no valid slot gives zeros; a block with no valid
slot (yet) leaves the state untouched (m stays -inf, exp is taken against 0, so no NaN). A block in which no token
of a chunk has a valid slot is skipped: it would multiply the state by exp(0) = 1 and add zeros, so skipping it
changes no value (at most the sign of an accumulator that is exactly zero), and a prompt shorter than top-k (a
token t selects its t + 1 causal rows, the rest of its slots empty) runs the blocks its prompt fills, not all of
top-k's.

A split-KV variant (`splits=2`, as flash-decoding and FlashMLA's split kernels cut a long KV range
across programs) cuts each token's valid slots into two halves by count (the first ceil(n/2) valid
slots, then the rest), runs the block loop over each half with its own running max, and merges the two
(m, l, acc) states in fp32. Its P is rounded against each half's own max, so it differs from the unsplit
kernel even when every valid slot of a token fits one block: a prompt of a few tokens (natural50's are
5-18) gives as many distinct band samples as longer ones. Without it, blocks of 16 slots or more
cannot tell the variants apart on such short selections and the band collapses to its two normalisers.

`BAND_FAMILY` orders the variants so that any prefix is as diverse as it can be: the default band
of 4 spans three block sizes, both orders, both normalisers and both split counts, and its members stay
distinct at top-k 32 (the `tiny` preset), where every block of 32 slots or more is a single block and
only block 16 splits the slots, and on selections of 2 to 16 slots, where only the normaliser and the
split differ. Band sizes up to BAND_FAMILY_SIZE (16 kernels: every block size x order x normaliser once,
two of them split) are served; a larger k is a ValueError.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import torch

from glmcheck.backends import forms
from glmcheck.backends.names import BAND_FAMILY_SIZE
from glmcheck.kernels.validate import check_prefill_args, valid_slot_mask


@dataclass(frozen=True)
class FlashVariant:
    """One legitimate flash-style kernel: KV block size (index slots), block order, normaliser, and how many
    halves a token's valid slots are split into (1 or 2; split-KV)."""

    block: int
    reverse: bool = False
    sum_rounded: bool = False
    splits: int = 1
    score_tile: int = 0  # 0: one dot product over d_qk; T: one per T latent values and one over the rope, summed

    def describe(self) -> str:
        return (f"flash-style, blocks of {self.block} slots {'last to first' if self.reverse else 'first to last'}, "
                f"l sums the {'bf16' if self.sum_rounded else 'fp32'} P"
                + (", valid slots split in two halves merged in fp32 (split-KV)" if self.splits == 2 else "")
                + (f", scores summed per {self.score_tile} latent values (an FP8 kernel's scale after each tile's "
                   f"dot)" if self.score_tile else ""))


_F, _R = False, True
BAND_FAMILY: tuple[FlashVariant, ...] = (
    FlashVariant(16, _F, False),   # band:0
    FlashVariant(64, _R, False, 2),  # band:1  (split-KV: distinct from band:0 on selections of 2-16 slots)
    FlashVariant(32, _F, True),    # band:2
    FlashVariant(16, _R, True, 2),  # band:3   (default band of 4 ends here)
    FlashVariant(16, _F, True),    # band:4   (held out by `selftest --model`: distinct from 0-3 at top-k 32)
    FlashVariant(16, _R, False),   # band:5
    FlashVariant(128, _F, False),  # band:6
    FlashVariant(128, _R, True),   # band:7   (band of 8: all four block sizes, both orders and normalisers)
    FlashVariant(32, _R, False),
    FlashVariant(64, _F, True),
    FlashVariant(32, _F, False),
    FlashVariant(64, _R, True),
    FlashVariant(128, _F, True),
    FlashVariant(128, _R, False),
    FlashVariant(32, _R, True),
    FlashVariant(64, _F, False),
)
if len(BAND_FAMILY) != BAND_FAMILY_SIZE:
    raise ImportError(f"the band family has {len(BAND_FAMILY)} kernels; glmcheck.backends.names.BAND_FAMILY_SIZE says "
                      f"{BAND_FAMILY_SIZE}")


def flash_sparse_mla(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int = 512,
                     *, topk_length: torch.Tensor | None = None, variant: FlashVariant = BAND_FAMILY[0],
                     budget_bytes: int = 256 * 2**20) -> torch.Tensor:
    """Sparse-MLA prefill as the flash-style kernel `variant` computes it (module docstring); same
    arguments and contract as `glmcheck.kernels.sparse_mla_prefill`, returns [T, H, d_v] bf16 on q's
    device. Tokens are processed in chunks whose per-block working set stays near `budget_bytes`."""
    args = check_prefill_args(q, kv, indices, sm_scale, d_v, topk_length)
    num_tokens, num_heads, d_qk = args.q.shape
    out = torch.zeros((num_tokens, num_heads, d_v), dtype=torch.bfloat16, device=args.q.device)
    if num_tokens == 0 or args.topk == 0:
        return out
    valid = valid_slot_mask(args.indices, args.num_kv_rows, args.topk_length)
    halves = _split_halves(valid) if variant.splits == 2 else [valid]
    if band_impl(args.q.device) == "triton":
        _triton_band(args, halves, out, variant, budget_bytes)
        return out
    block = variant.block
    starts = list(range(0, args.topk, block))
    if variant.reverse:
        starts.reverse()
    # one token's fp32 working set per block: its rows, scores / probabilities, acc (and temporaries)
    per_token = 4 * (2 * block * d_qk + 4 * num_heads * block + 3 * num_heads * d_v + 8 * num_heads)
    chunk = max(1, budget_bytes // per_token)
    rows = _RowTable.of(args.kv)
    for start in range(0, num_tokens, chunk):
        stop = min(start + chunk, num_tokens)
        q_chunk, idx = args.q[start:stop].float(), args.indices[start:stop]
        states = [_flash_state(q_chunk, rows, idx, part[start:stop], args.sm_scale, d_v, starts, block,
                               variant.sum_rounded, variant.score_tile) for part in halves]
        out[start:stop] = _finish(_merge(states), valid[start:stop])
    return out


def band_impl(device: torch.device) -> str:
    """Which form of the band runs on `device`: the active form (`glmcheck.backends.forms`: a check's
    `CheckOptions.band_impl`, else GLMCHECK_BAND_IMPL), auto taking "triton" (`band_triton`, one pass per token) on a
    CUDA device and "torch" (this module's block loop) elsewhere (triton on the CPU runs in Triton's interpreter).
    The two forms differ in the order of fp32 sums inside a dot product only (`band_triton` module docstring)."""
    return forms.active().band_on(device.type)


def _triton_band(args, halves: list[torch.Tensor], out: torch.Tensor, variant: FlashVariant,
                 budget_bytes: int) -> None:
    """`flash_sparse_mla` through `band_triton`: each half's state per token chunk (the chunk bounds the fp32
    states' memory and changes no value), merged and finished as the torch form does."""
    from glmcheck.backends.band_triton import band_state

    num_tokens, num_heads, _ = args.q.shape
    part = torch.zeros(args.indices.shape, dtype=torch.int8, device=args.q.device)
    for code, mask in enumerate(halves, start=1):
        part[mask] = code
    q, kv, indices = args.q.contiguous(), args.kv.contiguous(), args.indices.contiguous()
    valid = halves[0] if len(halves) == 1 else halves[0] | halves[1]
    chunk = max(1, budget_bytes // (4 * num_heads * (args.d_v + 2) * (len(halves) + 1)))
    for start in range(0, num_tokens, chunk):
        stop = min(start + chunk, num_tokens)
        states = [band_state(q[start:stop], kv, indices[start:stop], part[start:stop], code, args.sm_scale,
                             args.d_v, block=variant.block, reverse=variant.reverse,
                             sum_rounded=variant.sum_rounded, score_tile=variant.score_tile)
                  for code in range(1, len(halves) + 1)]
        out[start:stop] = _finish(_merge(states), valid[start:stop])


def _split_halves(valid: torch.Tensor) -> list[torch.Tensor]:
    """valid [T, K] -> two masks: each token's first ceil(n/2) valid slots (n its valid count), and the rest."""
    rank = valid.cumsum(dim=1)  # 1-based position of each valid slot among the token's valid slots
    first = valid & (rank <= (valid.sum(dim=1, keepdim=True) + 1) // 2)
    return [first, valid & ~first]


State = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (m [C, H, 1], l [C, H, 1], acc [C, H, d_v]), fp32

TABLE_BYTES = 1 << 30  # the largest fp32 copy of the KV rows a call makes (a prompt's rows; not a serving pool's)


class _RowTable:
    """How a block's rows are read: from an fp32 copy of the KV rows with one zero row appended (an unselected
    slot reads the zero row; one gather, no conversion or masking pass over the block), or, for a KV larger than
    TABLE_BYTES as fp32, from the bf16 rows converted and masked per block. Both give the same fp32 values, so the
    products that follow see the same tensors."""

    def __init__(self, kv: torch.Tensor, table: torch.Tensor | None):
        self.kv, self.table = kv, table

    @classmethod
    def of(cls, kv: torch.Tensor) -> _RowTable:
        rows, width = kv.shape
        if (rows + 1) * width * 4 > TABLE_BYTES:
            return cls(kv, None)
        return cls(kv, torch.cat([kv.float(), kv.new_zeros((1, width), dtype=torch.float32)]))

    def gather(self, indices: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
        """[C, B, D] fp32: the rows of `indices` [C, B] where `ok`, zeros elsewhere (a NaN in an unselected row,
        row 0 included, stays out)."""
        if self.table is not None:
            return self.table[torch.where(ok, indices, self.kv.shape[0]).long()]
        rows = self.kv[torch.where(ok, indices, 0).long()].float()
        return torch.where(ok[..., None], rows, 0.0)


def _flash_state(q: torch.Tensor, kv: _RowTable, indices: torch.Tensor, valid: torch.Tensor, sm_scale: float,
                 d_v: int, starts: list[int], block: int, sum_rounded: bool, score_tile: int = 0) -> State:
    """The online softmax over one chunk's valid slots: q [C, H, D] fp32, kv the KV rows [S, D] (`_RowTable`),
    indices / valid [C, K]; returns the running max, normaliser and unnormalised output. `score_tile` T > 0 sums
    the scores' dot products per T latent values and over the rope apart (`FlashVariant.score_tile`)."""
    num_tokens, num_heads, _ = q.shape
    m = torch.full((num_tokens, num_heads, 1), float("-inf"), dtype=torch.float32, device=q.device)
    l = torch.zeros((num_tokens, num_heads, 1), dtype=torch.float32, device=q.device)
    acc = torch.zeros((num_tokens, num_heads, d_v), dtype=torch.float32, device=q.device)
    occupied = _blocks_occupied(valid, block).tolist()  # a block no token of the chunk uses changes nothing
    for start in starts:
        if not occupied[start // block]:
            continue
        ok = valid[:, start:start + block]  # [C, B]
        rows = kv.gather(indices[:, start:start + block], ok)  # [C, B, D] fp32
        s = _scores(q, rows, d_v, score_tile) * sm_scale
        s = s.masked_fill(~ok[:, None, :], float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        base = torch.where(m_new == float("-inf"), 0.0, m_new)  # nothing valid yet: exp(-inf - 0) = 0, no NaN
        p = torch.exp(s - base)  # masked slots -> 0
        alpha = torch.exp(m - base)  # 1 when the max did not move, 0 before the first valid slot
        p16 = p.to(torch.bfloat16).float()
        acc = acc * alpha + torch.einsum("chb,cbd->chd", p16, rows[..., :d_v])
        l = l * alpha + (p16 if sum_rounded else p).sum(dim=-1, keepdim=True)
        m = m_new
    return m, l, acc


def _scores(q: torch.Tensor, rows: torch.Tensor, d_v: int, score_tile: int) -> torch.Tensor:
    """[C, H, B] fp32 q . rows: one dot product over the row, or (score_tile T) one per T latent values and one over
    the rope, summed in order."""
    if not score_tile:
        return torch.einsum("chd,cbd->chb", q, rows)
    edges = list(range(0, d_v, score_tile)) + [d_v] + ([q.shape[-1]] if q.shape[-1] > d_v else [])
    total = None
    for a, b in itertools.pairwise(edges):
        part = torch.einsum("chd,cbd->chb", q[..., a:b], rows[..., a:b])
        total = part if total is None else total + part
    return total


def _blocks_occupied(valid: torch.Tensor, block: int) -> torch.Tensor:
    """[ceil(K / block)] bool: whether any token has a valid slot in each block of `block` slots of valid [C, K]."""
    used = valid.any(dim=0)
    blocks = -(-used.numel() // block)
    padded = torch.zeros(blocks * block, dtype=torch.bool, device=valid.device)
    padded[:used.numel()] = used
    return padded.view(blocks, block).any(dim=1)


def _merge(states: list[State]) -> State:
    """Merge the (m, l, acc) of disjoint slot sets in fp32 (split-KV's combine); one state is returned as is."""
    m, l, acc = states[0]
    for m2, l2, acc2 in states[1:]:
        m_new = torch.maximum(m, m2)
        base = torch.where(m_new == float("-inf"), 0.0, m_new)
        a, b = torch.exp(m - base), torch.exp(m2 - base)
        m, l, acc = m_new, l * a + l2 * b, acc * a + acc2 * b
    return m, l, acc


def _finish(state: State, valid: torch.Tensor) -> torch.Tensor:
    """bf16(acc / l); zeros for a token with no valid slot; NaN/Inf from q or a selected row propagates (a NaN
    is never hidden)."""
    _, l, acc = state
    return torch.where(valid.any(dim=1)[:, None, None], acc / l.clamp_min(torch.finfo(torch.float32).tiny),
                       0.0).to(torch.bfloat16)


FP8_SCORE_TILE = 128  # the FP8 pool's latent values per scale (`glmcheck.kernels.fp8.TILE`)


def fp8_band_variant(k: int):
    """Variant k of the band over an FP8 KV cache (`--kv-cache-dtype fp8_e4m3`): BAND_FAMILY[k] reading the pool's
    dequantised rows as a bf16 kernel does (k even), or as an FP8 kernel does (k odd): each 128-value tile's dot
    product with the e4m3 codes, its scale applied after it, the rope's dot apart, summed. Scales are powers of two,
    so scale x (q . codes) equals q . (codes x scale) bit for bit in fp32, and the FP8 form is the tile-summed
    dot over the dequantised rows (`score_tile`); V read as codes x scale is the dequantised row exactly. A
    dequantisation in fp32 instead of bf16 gives the same values for the same reason."""
    spec = BAND_FAMILY[_checked_index(k)]
    spec = dataclasses.replace(spec, score_tile=FP8_SCORE_TILE if k % 2 else 0)

    def variant(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
        return flash_sparse_mla(q, kv, indices, sm_scale, d_v, topk_length=topk_length, variant=spec)

    variant.__doc__ = f"band:{k} over the FP8 pool: {spec.describe()}"
    return variant


def _checked_index(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < BAND_FAMILY_SIZE:
        raise ValueError(f"band variant must be an int in [0, {BAND_FAMILY_SIZE - 1}] (the band family has "
                         f"{BAND_FAMILY_SIZE} kernels, so a band holds at most {BAND_FAMILY_SIZE}), got {k!r}")
    return k


def band_variant(k: int):
    """Legitimate variant k (0 <= k < BAND_FAMILY_SIZE) of the checks' noise band: the flash-style
    kernel BAND_FAMILY[k]. Same signature as the kernel; selects the same rows as the reference, so
    any difference from it is rounding alone. ValueError for any other k."""
    spec = BAND_FAMILY[_checked_index(k)]

    def variant(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
        return flash_sparse_mla(q, kv, indices, sm_scale, d_v, topk_length=topk_length, variant=spec)

    variant.__doc__ = f"band:{k}: {spec.describe()}"
    return variant
