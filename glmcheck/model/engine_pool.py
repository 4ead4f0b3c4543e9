"""The paged KV pool and the packed calls of `--calls serving`: a layer's attention called as an engine's extend.

Per forward (one `EnginePool`, every layer of it; seeded, so every backend of a check sees the same layout):

- a pool of R rows [R, d_qk] bf16 in pages of PAGE rows; under an FP8 KV cache also its V3.2 FP8 form [R, bytes]
  uint8 (`glmcheck.kernels.fp8`), whose dequantised values the bf16 rows are. The prompt's rows lie at
  ceil(T / PAGE) pages drawn at random, always including the pool's last page (so its rows cross every offset
  boundary below R x d_qk: 2**31 elements on a GPU by default); the prompt's row t is at `prompt_slots[t]`.
- every other row holds a row of another request: a copy of a prompt row drawn at random (finite, of the prompt's
  scale, never zero), as stale pages of finished requests hold.
- each layer starts with the prompt's slots holding such stale rows; chunk c's call first writes the rows of its
  own tokens, so each call reads a pool holding its prefix and itself, and the prompt's later rows are not there yet.
- the prompt's indices become pool slots; `topk_length` is each token's last valid slot + 1, and every slot past it
  names a valid-looking row (half the prompt's own slots, half anywhere in the pool), never -1.
- each call packs `requests` requests: the prompt's chunk and requests - 1 others, each with its own pages, a cached
  prefix of up to FILLER_CONTEXT x top-k rows and an extend of 1..FILLER_EXTEND tokens (a mixed batch: cached and
  fresh). Their queries are copies of prompt queries; their outputs are discarded. The prompt's place in the pack
  turns with the chunk and the selection (first, middle, last).

The exact reference reads the same rows in the same slot order either way, so its outputs equal the one-shot
call's bit for bit (docs/kernel.md, "Engine-shaped calls").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from glmcheck.kernels.fp8 import pool_bytes as fp8_pool_bytes
from glmcheck.model.engine_shape import DEFAULT_REQUESTS, PAGE, EngineShape

if TYPE_CHECKING:
    from transformers import GlmMoeDsaConfig

FILLER_EXTEND = 8  # the most tokens another request extends by in one call (1: a decode token)
FILLER_CONTEXT = 2  # its cached prefix: up to this many x top-k rows


def filler_rows(topk: int) -> int:
    """Rows (whole pages) another request holds in the pool: its prefix and extend."""
    return math.ceil((FILLER_CONTEXT * topk + FILLER_EXTEND) / PAGE) * PAGE


def needed_rows(tokens: int, topk: int, requests: int) -> int:
    """Pool rows the prompt's pages and the other requests' take."""
    return math.ceil(tokens / PAGE) * PAGE + (requests - 1) * filler_rows(topk)


def pool_memory(pool_rows: int, d_qk: int, fp8_row_bytes: int | None = None) -> int:
    """Bytes one forward's pool holds (`EnginePool`): its bf16 rows [R, d_qk], its FP8 form [R, fp8_row_bytes]
    under an FP8 KV cache, and the int64 row draw that fills it (transient, at its build)."""
    return pool_rows * (2 * d_qk + (fp8_row_bytes or 0) + 8)


def serving_pool(config: GlmMoeDsaConfig, shape: EngineShape, tokens: int, device_type: str, *, fp8: bool = False,
                 dense_threshold: int | None = None) -> tuple[int, int]:
    """(rows, bytes) of the pool one forward of a `tokens`-token prompt holds under `shape` on `device_type` ("cpu"
    or "cuda"): the rows `EngineShape.resolved` gives for what the prompt's pages and the other requests' need (top-k
    min(index_topk, T), or T where `dense_threshold` makes the layers dense; a default pool grows to twice that),
    their bytes `pool_memory` with the FP8 form under an FP8 KV cache (`fp8`). ValueError naming --pool-rows when a
    given pool cannot hold them. The one rule `Setup` (a check's memory check) and `glmcheck plan` both use."""
    topk = tokens if dense_threshold is not None and tokens <= dense_threshold else min(config.index_topk, tokens)
    needed = needed_rows(tokens, topk, shape.requests or DEFAULT_REQUESTS)
    d_qk, d_rope = config.kv_lora_rank + config.qk_rope_head_dim, config.qk_rope_head_dim
    rows = shape.resolved(device_type, d_qk, needed).pool_rows
    return rows, pool_memory(rows, d_qk, fp8_pool_bytes(d_qk, d_rope) if fp8 else None)


@dataclass(frozen=True)
class PackedCall:
    """One call of a chunk: indices [N, K] int32 pool slots, lengths [N] int32, `query` [N] long (the q row each
    call token copies), the prompt's tokens at rows offset .. offset + count of the call."""

    indices: torch.Tensor
    lengths: torch.Tensor
    query: torch.Tensor
    offset: int
    count: int


class EnginePool:
    """The pool of one forward (module docstring). `rows` [T, d_qk] bf16 are the first layer's KV rows (the stale
    rows are copies of them), `codes` [T, bytes] uint8 their FP8 pool rows or None, `shape` resolved."""

    def __init__(self, shape: EngineShape, rows: torch.Tensor, codes: torch.Tensor | None, topk: int):
        self.shape, self.topk = shape, topk
        self.tokens, device = rows.shape[0], rows.device
        total_pages = shape.pool_rows // PAGE
        own_pages = math.ceil(self.tokens / PAGE)
        small = torch.Generator().manual_seed(shape.seed)
        self._device_gen = torch.Generator(device=device).manual_seed(shape.seed)
        order = torch.randperm(total_pages - 1, generator=small)
        pages = torch.cat([torch.tensor([total_pages - 1]), order[:own_pages - 1]])
        pages = pages[torch.randperm(own_pages, generator=small)]
        span = filler_rows(topk) // PAGE
        rest = order[own_pages - 1:]
        self._filler_slots = [_slots_of(rest[j * span:(j + 1) * span], span * PAGE)  # on the CPU
                              for j in range(shape.requests - 1)]
        self.prompt_slots = _slots_of(pages, self.tokens).to(device)
        source = torch.randint(0, self.tokens, (shape.pool_rows,), generator=self._device_gen, device=device)
        self.rows = rows[source]
        self.codes = codes[source] if codes is not None else None
        self._stale_rows = self.rows[self.prompt_slots].clone()
        self._stale_codes = self.codes[self.prompt_slots].clone() if codes is not None else None
        self._stale_ids: dict[int, torch.Tensor] = {}
        self._fillers: dict[tuple[int, int], list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = {}
        self._selection: tuple | None = None  # (indices, slots, lengths, turn, packed calls by chunk)
        self._turns = 0

    def chunks(self) -> list[tuple[int, int]]:
        """(start, stop) of each chunk of the prompt's tokens."""
        return [(s, min(s + self.shape.chunk, self.tokens)) for s in range(0, self.tokens, self.shape.chunk)]

    @property
    def kv(self) -> torch.Tensor:
        """The pool as the backends are handed it, [R, 1, d_qk] bf16 (a view of `rows`, as FlashMLA's interface and
        the engines' KV buffers shape it)."""
        return self.rows.unsqueeze(1)

    def paged_codes(self) -> torch.Tensor | None:
        """The FP8 pool as engines page it, [R / PAGE, PAGE, 1, bytes] uint8 (a view), or None under bf16."""
        return None if self.codes is None else self.codes.view(-1, PAGE, 1, self.codes.shape[1])

    def begin_layer(self) -> None:
        """The prompt's slots back to stale rows: a layer's pool before its first chunk is written."""
        self.rows[self.prompt_slots] = self._stale_rows
        if self.codes is not None:
            self.codes[self.prompt_slots] = self._stale_codes

    def write(self, rows: torch.Tensor, codes: torch.Tensor | None, start: int, stop: int) -> None:
        """The rows of prompt tokens start..stop (and their FP8 codes) to their slots."""
        slots = self.prompt_slots[start:stop]
        self.rows[slots] = rows[start:stop]
        if self.codes is not None:
            self.codes[slots] = codes[start:stop]

    def packed(self, indices: torch.Tensor, chunk: int) -> PackedCall:
        """The call of chunk `chunk` for the one-shot `indices` [T, K] (-1 or rows of the prompt): the same
        tensors for every layer that shares the selection (its plans are then reused)."""
        if self._selection is None or self._selection[0] is not indices:
            slots, lengths = self._remap(indices)
            self._selection = (indices, slots, lengths, self._turns, {})
            self._turns += 1
        _, slots, lengths, turn, calls = self._selection
        if chunk not in calls:
            calls[chunk] = self._pack(slots, lengths, chunk, (chunk + turn) % self.shape.requests)
        return calls[chunk]

    def _remap(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(pool slots [T, K] int32, lengths [T] int32): valid rows at their slots, -1 kept below the last valid slot,
        stale valid-looking slots past it."""
        topk = indices.shape[1]
        valid = indices >= 0
        slots = torch.where(valid, self.prompt_slots[indices.clamp_min(0).long()], -1)
        position = torch.arange(1, topk + 1, device=indices.device)
        lengths = torch.where(valid, position, 0).amax(dim=1) if topk else indices.new_zeros(indices.shape[0])
        past = position[None, :] > lengths[:, None]
        slots = torch.where(past, self._stale(topk), slots)
        return slots.to(torch.int32).contiguous(), lengths.to(torch.int32)

    def _stale(self, topk: int) -> torch.Tensor:
        """[T, K] stale slot ids: even slots rows of the prompt's own pages, odd ones anywhere in the pool."""
        if topk not in self._stale_ids:
            shape, device = (self.tokens, topk), self.prompt_slots.device
            anywhere = torch.randint(0, self.shape.pool_rows, shape, generator=self._device_gen, device=device)
            own = self.prompt_slots[torch.randint(0, self.tokens, shape, generator=self._device_gen, device=device)]
            anywhere[:, ::2] = own[:, ::2]
            self._stale_ids[topk] = anywhere
        return self._stale_ids[topk]

    def _pack(self, slots: torch.Tensor, lengths: torch.Tensor, chunk: int, place: int) -> PackedCall:
        start, stop = self.chunks()[chunk]
        others = iter(self._others(chunk, slots.shape[1]))
        parts, offset = [], 0
        for request in range(self.shape.requests):
            if request == place:
                offset = sum(p[0].shape[0] for p in parts)
                parts.append((torch.arange(start, stop, device=slots.device), slots[start:stop], lengths[start:stop]))
            else:
                parts.append(next(others))
        query, idx, length = (torch.cat([p[i] for p in parts]) for i in range(3))
        return PackedCall(idx.contiguous(), length.contiguous(), query, offset, stop - start)

    def _others(self, chunk: int, topk: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """The other requests of a chunk's call: (q rows copied [n], indices [n, K] int32, lengths [n] int32) each."""
        key = (chunk, topk)
        if key not in self._fillers:
            gen = torch.Generator().manual_seed(self.shape.seed * 7919 + chunk * 131 + topk)
            device = self.prompt_slots.device
            made = []
            for own in self._filler_slots:
                extend = int(torch.randint(1, min(FILLER_EXTEND, self.shape.chunk) + 1, (1,), generator=gen))
                prefix = int(torch.randint(0, own.shape[0] - extend + 1, (1,), generator=gen))
                idx = torch.randint(0, self.shape.pool_rows, (extend, topk), generator=gen, dtype=torch.int32)
                length = torch.empty(extend, dtype=torch.int32)
                for i in range(extend):
                    count = min(topk, prefix + i + 1)
                    idx[i, :count] = own[torch.randperm(prefix + i + 1, generator=gen)[:count]].to(torch.int32)
                    length[i] = count
                query = torch.randint(0, self.tokens, (extend,), generator=gen)
                made.append((query.to(device), idx.to(device), length.to(device)))
            self._fillers[key] = made
        return self._fillers[key]


def _slots_of(pages: torch.Tensor, rows: int) -> torch.Tensor:
    """The pool slots of the first `rows` rows laid on `pages` in order, [rows] long."""
    row = torch.arange(rows)
    return pages[row // PAGE].long() * PAGE + row % PAGE
