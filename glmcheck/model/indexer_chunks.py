"""The DSA indexer's top-k in query chunks: transformers' result bit for bit, in memory linear in T.

transformers' `GlmMoeDsaIndexer` scores every query against every key at once (an fp32
[B, T, Hi, S] tensor, then [B, T, S]) and reads a [B, 1, T, S] causal mask that the model builds
for it: memory grows with T^2 (GLM-5.2, Hi = 32: the fp32 scores and their scaled copy alone are
256 T^2 bytes, 1 TiB at 65536 tokens).
`chunked_topk` computes the same top-k a chunk of query rows at a time:

- the projections run once on all rows, as transformers runs them (`index_queries`, `index_keys`,
  `index_weights`): every row's q, k and weights are the same bits as in transformers' forward;
- per chunk of C rows: the fp32 scores [B, C, Hi, S], their weighted sum [B, C, S] (the same
  matmuls, batched over fewer rows), the causal mask of those rows (or the rows of a real mask),
  and `torch.topk` per row, which depends on its own row only. The result is transformers' top-k,
  the masked slots included (token t < index_topk selects its t + 1 causal positions, then masked
  future positions, which the swap maps to -1), bit for bit.

Chunk rows C (`chunk_rows`): the transient bytes of one chunk stay within `budget_bytes`:

    row_bytes = B * S * (4 * Hi + 17)
                fp32 head scores [Hi, S], fp32 weighted scores [S], bool causal mask [S], torch.topk's
                fp32 values and int64 indices (at most 12 bytes per key); the head scores come from one GEMM
                a batch (`weighted_scores`), which copies no keys
    C = max(budget_bytes // row_bytes, MIN_ROWS), and C = T when S <= index_topk

and chunks split T evenly (no short tail chunk). On CUDA the automatic choice avoids two shapes
whose results can depend on the row count: a prompt whose keys number at most index_topk is one chunk
(small chunks of such prompts differed on the H200: torch.topk then sorts every row whole, and cuBLAS
may choose another GEMM for few rows; the chunk is at most index_topk^2 row bytes, 0.6 GB for
GLM-5.2), and every chunk keeps at least 16 rows (MIN_ROWS
and the even split: CUDA's torch.topk sorts rows of 100k+ keys instead of radix-selecting when it gets
at most 10 of them). Checked on an H200 (torch 2.11, transformers 5.17) at GLM-5.2's indexer geometry:
the automatic choice and explicit chunks of 37 to 1000 rows equal transformers' top-k bit for bit at
T = 1500, 2048, 2049, 4099, 16384 and 20000, the model's logits too at 1500, 4099 and 16384; explicit
chunks of 1 and 37 rows of a 1500-token prompt did not. On the CPU every chunk size is exact.

The model's causal mask: under the swap, `absorbed_mask` (registered with transformers'
`AttentionMaskInterface`) returns `causal_standin`, a [B, 1, T, T] bool tensor broadcast from one
element (no T^2 memory), when the mask is plain causal (no padding, no cache offset), else
transformers' sdpa mask; `chunked_topk` applies causality itself for the stand-in and reads the
rows of a real mask. `install_chunked_indexer` swaps an indexer module's forward for `chunked_topk`
and returns the function that restores it. Tests force the chunk size of the indexers installed inside
a `forced_chunks` block.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import torch
from transformers import AttentionMaskInterface
from transformers.masking_utils import causal_mask_function

from glmcheck.model.indexer_scores import index_keys, index_queries, index_weights, transposed_keys, weighted_scores

INDEX_BUDGET_BYTES = 1 << 30  # transient bytes of one chunk's scores (module docstring)
MIN_ROWS = 32

_FORCED: ContextVar[tuple[int | None, int]] = ContextVar("forced_index_chunks", default=(None, INDEX_BUDGET_BYTES))
_STANDIN_BASES: dict[torch.device, torch.Tensor] = {}  # one bool element per device, broadcast by causal_standin


def chunk_rows(batch: int, queries: int, keys: int, heads: int, head_dim: int, topk: int,
               budget_bytes: int = INDEX_BUDGET_BYTES) -> int:
    """Query rows per chunk (module docstring): as many as keep one chunk's transient scores within
    budget_bytes, at least MIN_ROWS; all `queries` rows when keys <= topk. batch B, keys S, the indexer's
    heads Hi, head_dim D and index_topk."""
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 1:
        raise ValueError(f"budget_bytes must be a positive int, got {budget_bytes!r}")
    if keys <= topk:
        return max(queries, 1)
    return max(MIN_ROWS, budget_bytes // row_bytes(batch, keys, heads))


def row_bytes(batch: int, keys: int, heads: int) -> int:
    """Transient bytes of one query row of a chunk (module docstring)."""
    return batch * keys * (4 * heads + 17)


def row_chunks(tokens: int, rows: int) -> list[slice]:
    """[0, tokens) cut into ceil(tokens / rows) contiguous slices of near-equal size (each <= rows)."""
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ValueError(f"rows must be a positive int, got {rows!r}")
    count = max(1, math.ceil(tokens / rows))
    bounds = [i * tokens // count for i in range(count + 1)]
    return [slice(bounds[i], bounds[i + 1]) for i in range(count)]


def causal_standin(batch: int, length: int, device: torch.device | str) -> torch.Tensor:
    """A [batch, 1, length, length] bool tensor broadcast from one True element (no memory per position)
    standing for the plain causal mask; only `chunked_topk` reads it (as causal), see `is_causal_standin`."""
    device = torch.empty(0, device=device).device  # "cuda" -> "cuda:0": the key is_causal_standin looks up
    base = _STANDIN_BASES.get(device)
    if base is None:
        base = _STANDIN_BASES[device] = torch.ones((), dtype=torch.bool, device=device)
    return base.expand(batch, 1, length, length)


def is_causal_standin(mask: torch.Tensor) -> bool:
    """True when mask (or any view of it, e.g. mask[:, 0]) is a `causal_standin`."""
    base = _STANDIN_BASES.get(mask.device)
    return base is not None and mask.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()


def _zero(offset) -> bool:
    return int(offset) == 0  # an int, or a 0-d tensor from a cache


def absorbed_mask(**kwargs) -> torch.Tensor | None:
    """`AttentionMaskInterface` function of the swapped (absorbed) attention: the causal stand-in when the
    mask is plain causal (causal mask function, no padding, no offsets, as many queries as keys), else
    transformers' sdpa mask built from the same arguments (padding, decoding with a cache)."""
    padding = kwargs.get("attention_mask")
    plain = (kwargs.get("mask_function", causal_mask_function) is causal_mask_function
             and _zero(kwargs.get("q_offset", 0)) and _zero(kwargs.get("kv_offset", 0))
             and kwargs["q_length"] == kwargs["kv_length"]
             and (padding is None or bool(padding.all())))
    if not plain:
        return AttentionMaskInterface()["sdpa"](**kwargs)
    return causal_standin(kwargs["batch_size"], kwargs["q_length"], kwargs.get("device", "cpu"))


def _mask_rows(scores: torch.Tensor, mask: torch.Tensor, rows: slice) -> torch.Tensor:
    """Apply the rows `rows` of the indexer's mask [B, T, S] (bool: True attends; float: additive) to the
    chunk's scores [B, C, S] in place, as transformers applies the whole mask."""
    if is_causal_standin(mask):
        positions = torch.arange(rows.start, rows.stop, device=scores.device)
        future = torch.arange(scores.shape[-1], device=scores.device)[None, :] > positions[:, None]  # [C, S]
        return scores.masked_fill_(future, float("-inf"))
    part = mask if mask.shape[-2] == 1 else mask[..., rows, :]
    if part.dtype == torch.bool:
        return scores.masked_fill_(~part, float("-inf"))
    return scores.add_(part)


@torch.no_grad()
def chunked_topk(indexer: torch.nn.Module, hidden_states: torch.Tensor, q_resid: torch.Tensor,
                 position_embeddings: tuple[torch.Tensor, torch.Tensor], attention_mask: torch.Tensor,
                 position_ids: torch.Tensor | None = None, cache=None, past_key_values=None, *,
                 rows: int | None = None, budget_bytes: int = INDEX_BUDGET_BYTES) -> torch.Tensor:
    """`GlmMoeDsaIndexer.forward`, query chunk by chunk: the int32 top-k [B, T, min(index_topk, S)].

    Same arguments as the module's forward (`cache` in transformers 5.24, `past_key_values` in 5.17;
    position_ids unused there too); attention_mask [B, T, S] as the attention passes it (a real mask or
    `causal_standin`). rows: query rows per chunk (default from budget_bytes, `chunk_rows`).
    """
    cache = cache if cache is not None else past_key_values
    batch, tokens, _ = hidden_states.shape
    q = index_queries(indexer, q_resid, position_embeddings)  # [B, T, Hi, D], all rows as transformers
    keys = index_keys(indexer, hidden_states, position_embeddings)
    if cache is not None:
        keys = cache.update_indexer(keys, indexer.layer_idx)
    keys_t = transposed_keys(keys)  # fp32 [B, 1, D, S]
    weights = index_weights(indexer, hidden_states)  # fp32 [B, T, Hi]
    num_keys = keys_t.shape[-1]
    if is_causal_standin(attention_mask) and num_keys != tokens:
        raise RuntimeError(f"the causal stand-in mask needs as many keys as queries, got {num_keys} keys for "
                           f"{tokens} queries")
    topk = min(indexer.index_topk, num_keys)
    out = torch.empty((batch, tokens, topk), dtype=torch.int32, device=hidden_states.device)
    if rows is None:
        rows = chunk_rows(batch, tokens, num_keys, indexer.n_heads, indexer.head_dim, indexer.index_topk, budget_bytes)
    for part in row_chunks(tokens, rows):
        scores = weighted_scores(q[:, part], keys_t, weights[:, part], indexer.softmax_scale)  # [B, C, S]
        scores = _mask_rows(scores, attention_mask, part)
        out[:, part] = scores.topk(topk, dim=-1).indices
    return out


@contextlib.contextmanager
def forced_chunks(*, rows: int | None = None, budget_bytes: int = INDEX_BUDGET_BYTES) -> Iterator[None]:
    """The testing entry point: indexers installed inside the block (by `use_backend` too) take `rows` query rows
    a chunk, or as many as `budget_bytes` holds (`chunk_rows`). ValueError for a value that is not a positive int."""
    for option, value in (("rows", rows), ("budget_bytes", budget_bytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{option} must be a positive int, got {value!r}")
    token = _FORCED.set((rows, budget_bytes))
    try:
        yield
    finally:
        _FORCED.reset(token)


def install_chunked_indexer(indexer: torch.nn.Module) -> Callable[[], None]:
    """Make `indexer` (a GlmMoeDsaIndexer) compute its top-k with `chunked_topk` (an instance attribute
    `forward`; its forward hooks still run) at the default chunk size, or the one `forced_chunks` sets; returns the
    function that restores its previous forward."""
    rows, budget_bytes = _FORCED.get()
    own = vars(indexer)
    had, previous = "forward" in own, own.get("forward")
    indexer.forward = functools.partial(chunked_topk, indexer, rows=rows, budget_bytes=budget_bytes)

    def restore() -> None:
        if had:
            indexer.forward = previous
        else:
            vars(indexer).pop("forward", None)

    return restore
