"""The pool and packed calls of `--calls serving` (glmcheck.model.engine_pool): where the prompt's rows lie, what the
rest of the pool holds, what each chunk's call reads, and the exact reference on those calls bit for bit equal to
its one-shot call; the FP8 pool at pool slots, read by flashmla_kv (its op's CPU stand-in)."""

from __future__ import annotations

import pytest
import torch

from glmcheck.backends import flashmla_kv
from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.checks import metrics
from glmcheck.kernels.fp8 import dequantize_kv_pool, quantize_kv_pool
from glmcheck.model.engine_pool import PAGE, EnginePool, needed_rows
from glmcheck.model.engine_shape import EngineShape, check_engine_options
from tests.support.flashmla_standin import StandIn

TOKENS, TOPK, D_QK, D_V = 150, 32, 80, 64


def _prompt(tokens: int = TOKENS, d_qk: int = D_QK, seed: int = 0):
    """rows [T, d_qk] bf16 and causal one-shot indices [T, K] (token t < K selects its t + 1 rows first, -1 after)."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(tokens, d_qk, generator=g).bfloat16()
    indices = torch.full((tokens, TOPK), -1, dtype=torch.int32)
    for t in range(tokens):
        chosen = torch.randperm(t + 1, generator=g)[:TOPK]
        indices[t, :len(chosen)] = chosen.to(torch.int32)
    return rows, indices


def _pool(rows, requests: int = 3, chunk: int = 48, codes=None, seed: int = 0) -> EnginePool:
    shape = EngineShape(chunk, None, requests, seed).resolved("cpu", rows.shape[1],
                                                              needed_rows(rows.shape[0], TOPK, requests))
    return EnginePool(shape, rows, codes, TOPK)


def test_the_prompt_lies_on_shuffled_pages_among_other_rows():
    rows, _ = _prompt()
    pool = _pool(rows)
    slots = pool.prompt_slots
    assert pool.shape.pool_rows == 4096 and len(set(slots.tolist())) == TOKENS
    assert bool((slots % PAGE == torch.arange(TOKENS) % PAGE).all()), "whole pages, rows in order within a page"
    pages = (slots[::PAGE] // PAGE).tolist()
    assert pool.shape.pool_rows // PAGE - 1 in pages, "the pool's last page holds prompt rows (every boundary crossed)"
    assert pages != sorted(pages) or len(pages) < 2 or pages[0] == pool.shape.pool_rows // PAGE - 1
    others = torch.ones(pool.shape.pool_rows, dtype=torch.bool)
    others[slots] = False
    held = pool.rows[others]
    assert bool(torch.isfinite(held).all()) and bool((held.abs().sum(dim=1) > 0).all()), "non-zero, finite rows"
    assert bool((held[:, None, :] == rows[None, :, :]).all(dim=2).any(dim=1).all()), "other requests' rows: plausible"


def test_each_chunk_reads_its_prefix_and_itself_with_stale_slots_past_its_length():
    rows, indices = _prompt()
    pool = _pool(rows)
    pool.begin_layer()
    places, others_slots = set(), set(range(pool.shape.pool_rows)) - set(pool.prompt_slots.tolist())
    for chunk, (start, stop) in enumerate(pool.chunks()):
        pool.write(rows, None, start, stop)
        assert torch.equal(pool.rows[pool.prompt_slots[:stop]], rows[:stop]), "the prefix and the chunk are there"
        later = pool.rows[pool.prompt_slots[stop:]]
        assert not bool((later == rows[stop:]).all(dim=1).all()) if stop < TOKENS else True, "later rows not yet"
        call = pool.packed(indices, chunk)
        places.add(call.offset == 0)
        own = call.indices[call.offset:call.offset + call.count]
        length = call.lengths[call.offset:call.offset + call.count]
        expected = torch.where(indices[start:stop] >= 0, pool.prompt_slots[indices[start:stop].clamp_min(0).long()],
                               -1)
        valid = torch.arange(TOPK)[None, :] < length[:, None]
        assert torch.equal(torch.where(valid, own, -1), expected.to(torch.int32)), "rows remapped to pool slots"
        assert torch.equal(length, (indices[start:stop] >= 0).sum(dim=1).to(torch.int32))
        past = own[~valid]
        assert bool(((past >= 0) & (past < pool.shape.pool_rows)).all()), "stale ids past topk_length, not -1"
        assert torch.equal(call.query[call.offset:call.offset + call.count], torch.arange(start, stop))
        rest = torch.cat([call.indices[:call.offset], call.indices[call.offset + call.count:]])
        rest_len = torch.cat([call.lengths[:call.offset], call.lengths[call.offset + call.count:]])
        assert rest.shape[0] >= 2, "two other requests packed"
        held = rest[torch.arange(TOPK)[None, :] < rest_len[:, None]]
        assert set(held.tolist()) <= others_slots, "other requests read their own pages"
    assert places == {True, False}, "the prompt first in one call, behind another request in another"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_exact_reference_gives_its_one_shot_outputs_bit_for_bit(dtype):
    rows, indices = _prompt()
    q = torch.randn(TOKENS, 4, D_QK, generator=torch.Generator().manual_seed(3)).bfloat16()
    one_shot = sparse_mla_reference(q, rows, indices, 0.1, D_V, dtype=dtype)
    pool = _pool(rows)
    pool.begin_layer()
    for chunk, (start, stop) in enumerate(pool.chunks()):
        pool.write(rows, None, start, stop)
        call = pool.packed(indices, chunk)
        out = sparse_mla_reference(q[call.query], pool.rows, call.indices, 0.1, D_V, topk_length=call.lengths,
                                   dtype=dtype)
        assert torch.equal(out[call.offset:call.offset + call.count], one_shot[start:stop])


def test_the_fp8_pool_is_at_pool_slots_and_flashmla_kv_reads_it(monkeypatch):
    """Under --kv-cache-dtype fp8_e4m3 the pool is DSA's FP8 pool, the bf16 rows its dequantised values, and
    flashmla_kv is handed that pool itself (no pool written from the rows)."""
    standin = StandIn(12)
    monkeypatch.setattr(flashmla_kv, "_decode_op", lambda: standin)
    raw, indices = _prompt(70, 576)
    paged = quantize_kv_pool(raw, d_rope=64)
    rows = dequantize_kv_pool(paged, 70, d_rope=64)
    codes = paged.view(-1, paged.shape[-1])[:70]
    pool = _pool(rows, requests=2, codes=codes)
    pool.begin_layer()
    pool.write(rows, codes, 0, 48)
    assert torch.equal(dequantize_kv_pool(pool.paged_codes(), pool.shape.pool_rows, d_rope=64), pool.rows)
    assert torch.equal(pool.codes[pool.prompt_slots[:48]], codes[:48])
    flashmla_kv.hold_pool(pool.rows, pool.paged_codes())
    try:
        call = pool.packed(indices, 0)
        q = torch.randn(call.query.shape[0], 8, 576, generator=torch.Generator().manual_seed(1)).bfloat16()
        out = flashmla_kv.flashmla_kv_prefill(q, pool.kv, call.indices, 0.05, 512, topk_length=call.lengths)
    finally:
        flashmla_kv.release_pool()
    cache = standin.calls[0][1]
    assert cache.data_ptr() == pool.codes.data_ptr() and cache.shape == (pool.shape.pool_rows // PAGE, PAGE, 1, 656)
    written = flashmla_kv.flashmla_kv_prefill(q, pool.rows.clone(), call.indices, 0.05, 512, topk_length=call.lengths)
    assert standin.calls[1][1].data_ptr() != pool.codes.data_ptr() and torch.equal(out, written), \
        "the same values as a pool written from the rows"
    exact = sparse_mla_reference(q, pool.rows, call.indices, 0.05, 512, topk_length=call.lengths)
    assert metrics.rel_l2(out, exact) < 2 ** -8


@pytest.mark.parametrize("calls, chunk, pool_rows, requests, message", [
    ("serving", 0, None, None, "--chunk must be an int >= 1"),
    ("prefill", 64, None, None, "--chunk shape the engine's calls: give them with --calls serving"),
    ("serving", None, 100, None, "--pool-rows must be a multiple of 64"),
    ("serving", None, None, 65, "--requests must be at most 64"),
    ("batch", None, None, None, "--calls must be one of prefill, serving"),
])
def test_engine_options_are_checked(calls, chunk, pool_rows, requests, message):
    from glmcheck.process.wording import cli_wording

    with cli_wording(), pytest.raises(ValueError, match=message):  # the command line's words
        check_engine_options(calls, chunk, pool_rows, requests)
    library = message.replace("--pool-rows", "pool_rows").replace("--", "")
    with pytest.raises(ValueError, match=library):  # a library caller's: the Python argument
        check_engine_options(calls, chunk, pool_rows, requests)


def test_a_given_pool_too_small_is_refused_and_the_default_grows():
    assert EngineShape().resolved("cpu", D_QK, 10_000).pool_rows == 20_032
    assert EngineShape().resolved("cuda", 576, 100).pool_rows == 2**22, "past 2^31 elements at d_qk 576"
    assert EngineShape().resolved("cuda", 80, 100).pool_rows * 80 > 2**31
    with pytest.raises(ValueError, match=r"pool_rows 128: .* need at least 192 rows"):
        EngineShape(pool_rows=128).resolved("cpu", D_QK, 192)
