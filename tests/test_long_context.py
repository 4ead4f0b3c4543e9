"""Long prompts (CPU): the chunked DSA indexer is transformers' top-k bit for bit (on the GPU too, at GLM-5.2's
and ref-gpu's indexer geometry), nothing on the absorbed path grows with T^2, and the memory plan is linear in T
there and bounds the dense hf_* paths; under --calls serving it adds the GPU's paged KV pool."""

from __future__ import annotations

import functools
import inspect
import itertools
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import DynamicCache

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.backends.registry import Backend
from glmcheck.evaluate import memory_plan
from glmcheck.model import build_dummy_model, make_config, use_backend
from glmcheck.model import memory as plan_module
from glmcheck.model.absorbed import kernel_indices
from glmcheck.model.checkpoint import load_checkpoint_model
from glmcheck.model.checkpoint_files import read_config
from glmcheck.model.engine_pool import filler_rows, pool_memory, serving_pool
from glmcheck.model.engine_shape import CPU_POOL_ROWS, GPU_POOL_ROWS, EngineShape
from glmcheck.model.indexer_chunks import (
    INDEX_BUDGET_BYTES,
    causal_standin,
    chunk_rows,
    chunked_topk,
    forced_chunks,
    row_chunks,
)
from glmcheck.model.memory import activation_bytes, check_fits, plan_memory
from glmcheck.model.swap import ABSORBED_IMPL, attention_modules
from glmcheck.model.trained import MODELS_DIR
from tests.support.plan_table import plan_cells

GIB = 2**30


@pytest.fixture(scope="module")
def models():
    return {"tiny": build_dummy_model(make_config("tiny"), seed=3, init="sharp"),
            "ref-cpu": load_checkpoint_model(MODELS_DIR / "ref-cpu", device=torch.device("cpu"))}


def _prompt(model, tokens: int, batch: int = 1) -> torch.Tensor:
    return torch.randint(3, model.config.vocab_size, (batch, tokens), generator=torch.Generator().manual_seed(tokens))


def _indexer_calls(model, ids: torch.Tensor) -> dict:
    """layer -> (indexer, args) of each full layer's indexer call in transformers' own forward (no swap)."""
    calls, handles = {}, []
    for attn in attention_modules(model):
        if attn.indexer is not None:
            def hook(module, args, layer=attn.layer_idx):
                calls[layer] = (module, args[:4])
            handles.append(attn.indexer.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            model(ids, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return calls


def _transformers_topk(indexer, args, cache=None) -> torch.Tensor:
    """The module's own (class) forward: transformers' indexer, unchunked."""
    name = "cache" if "cache" in inspect.signature(type(indexer).forward).parameters else "past_key_values"
    with torch.no_grad():
        return type(indexer).forward(indexer, *args, None, **{name: cache})


@pytest.mark.parametrize("name", ["tiny", "ref-cpu"])
@pytest.mark.parametrize("tokens,batch", [(20, 1), (45, 1), (96, 1), (45, 2)])
def test_chunked_topk_is_transformers_topk_bit_for_bit(models, name, tokens, batch):
    model = models[name]
    calls = _indexer_calls(model, _prompt(model, tokens, batch))
    assert sorted(calls) == [0, 2]  # the full layers (layer 1 is shared)
    for indexer, args in calls.values():
        hidden, q_resid, position_embeddings, mask = args
        expected = _transformers_topk(indexer, args)
        assert expected.dtype == torch.int32 and expected.shape == (batch, tokens, min(32, tokens))
        # rows t < index_topk - 1 select masked future positions too (the harness maps them to -1): covered here
        assert bool((expected.long() > torch.arange(tokens)[:, None]).any())
        standin = causal_standin(batch, tokens, "cpu")[:, 0]
        for rows in (1, 7, 32, None):
            assert torch.equal(chunked_topk(indexer, hidden, q_resid, position_embeddings, mask, rows=rows), expected)
            assert torch.equal(chunked_topk(indexer, hidden, q_resid, position_embeddings, standin, rows=rows),
                               expected), (name, tokens, rows)


@pytest.mark.gpu
@pytest.mark.parametrize("preset,tokens", [("glm-5.2", 1500), ("glm-5.2", 2049), ("glm-5.2", 4099),
                                           ("ref-gpu", 16384)])
def test_chunked_topk_is_transformers_topk_on_the_gpu(preset, tokens):
    """cuBLAS picks its GEMMs by shape: the chunked scores (one [C * Hi, D] x [D, S] GEMM a chunk) must still be
    transformers' broadcast products bit for bit, at the automatic chunk size, on real indexer geometries."""
    from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import GlmMoeDsaIndexer

    config = read_config(MODELS_DIR / preset) if preset == "ref-gpu" else make_config(preset, layers=1)
    gen = torch.Generator(device="cuda").manual_seed(tokens)
    indexer = GlmMoeDsaIndexer(config, layer_idx=0).to("cuda", torch.bfloat16)
    with torch.no_grad():
        for param in indexer.parameters():
            param.normal_(0.0, 0.05, generator=gen) if param.dim() > 1 else param.fill_(1.0)

    def rand(*shape):
        return torch.randn(*shape, device="cuda", generator=gen).to(torch.bfloat16)

    hidden, q_resid = rand(1, tokens, config.hidden_size), rand(1, tokens, config.q_lora_rank)
    angles = torch.rand(1, tokens, config.qk_rope_head_dim, device="cuda", generator=gen) * 6.28
    args = (hidden, q_resid, (angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)),
            torch.ones(tokens, tokens, dtype=torch.bool, device="cuda").tril_()[None])
    expected = _transformers_topk(indexer, args)
    assert torch.equal(chunked_topk(indexer, *args), expected)
    standin = causal_standin(1, tokens, "cuda")[:, 0]
    assert torch.equal(chunked_topk(indexer, *args[:3], standin), expected)


def test_chunked_topk_keeps_transformers_cache_behaviour(models):
    model = models["ref-cpu"]
    (indexer, args), _ = _indexer_calls(model, _prompt(model, 40)).values()
    mine, theirs = DynamicCache(config=model.config), DynamicCache(config=model.config)
    assert torch.equal(chunked_topk(indexer, *args, cache=mine, rows=9), _transformers_topk(indexer, args, theirs))
    layer = indexer.layer_idx
    assert torch.equal(mine.layers[layer].indexer_keys, theirs.layers[layer].indexer_keys)
    assert mine.layers[layer].indexer_keys.shape[1] == 40


def test_row_chunks_cover_the_rows_evenly():
    assert row_chunks(10, 3) == [slice(0, 2), slice(2, 5), slice(5, 7), slice(7, 10)]
    assert row_chunks(5, 1) == [slice(i, i + 1) for i in range(5)] and row_chunks(5, 9) == [slice(0, 5)]
    for tokens, rows in ((65536, 117), (1000, 32), (33, 32)):
        sizes = [s.stop - s.start for s in row_chunks(tokens, rows)]
        assert sum(sizes) == tokens and max(sizes) <= rows and min(sizes) >= min(tokens, rows // 2)
    # GLM-5.2's indexer at 65536 tokens: 145 bytes per key and row -> 112 rows in 1 GiB; a whole prompt of
    # at most index_topk tokens is one chunk (CUDA sorts such rows whole: its masked ties depend on the shape)
    assert chunk_rows(1, 65536, 65536, 32, 128, 2048) == 112
    assert chunk_rows(1, 2000, 2000, 32, 128, 2048) == 2000 and chunk_rows(1, 10**6, 10**6, 32, 128, 2048) == 32
    with pytest.raises(ValueError, match="rows must be a positive int, got 0"):
        row_chunks(10, 0)


def _run(model, ids, backend="reference", index_rows: int | None = None, **kw):
    indices = {}
    with forced_chunks(rows=index_rows), use_backend(model, backend, **kw) as session, torch.inference_mode():
        session.listeners.append(lambda layer, what, t: indices.setdefault(layer, t.clone()) if what == "indices"
                                 else None)
        logits = model(ids, logits_to_keep=1).logits
    return logits, indices, session


@pytest.mark.parametrize("name", ["tiny", "ref-cpu"])
def test_logits_are_identical_with_and_without_chunking(models, name):
    model = models[name]
    ids = _prompt(model, 70)
    for backend, tp, chunks in (("reference", 1, (1, 7, None)), ("reference", 2, (7,)), ("band:1", 1, (7,))):
        logits, indices, _ = _run(model, ids, backend, tp=tp, chunked_indexer=False)
        for rows in chunks:
            got, got_indices, session = _run(model, ids, backend, tp=tp, index_rows=rows)
            assert torch.equal(got, logits), (backend, tp, rows)
            assert sorted(got_indices) == [0, 1, 2] and all(torch.equal(got_indices[k], indices[k]) for k in indices)
            assert sum(session.calls.values()) == 3 * tp


def test_shared_layers_reuse_their_full_layers_topk_under_chunking(models):
    model = models["tiny"]
    ids = _prompt(model, 50)
    seen, inputs = {}, {}
    handles = [attn.register_forward_hook(lambda m, a, out, layer=attn.layer_idx: seen.__setitem__(layer, out[2]))
               for attn in attention_modules(model)]
    handles += [attn.indexer.register_forward_pre_hook(lambda m, a, layer=attn.layer_idx: inputs.__setitem__(layer, a))
                for attn in attention_modules(model) if attn.indexer is not None]
    try:
        _, indices, _ = _run(model, ids, index_rows=7)
    finally:
        for handle in handles:
            handle.remove()
    assert seen[1] is seen[0] and seen[2] is not seen[0]  # layer 1 ("shared") reuses layer 0's very tensor
    assert torch.equal(indices[1], indices[0]) and torch.equal(indices[0], kernel_indices(seen[0]))
    causal = torch.ones(50, 50, dtype=torch.bool).tril()[None]
    for layer in (0, 2):  # each full layer's chunked top-k is transformers' on the same inputs and the causal mask
        indexer = attention_modules(model)[layer].indexer
        assert torch.equal(seen[layer], _transformers_topk(indexer, (*inputs[layer][:3], causal)))


def test_the_swap_restores_the_indexer_and_mask_also_after_an_error(models):
    model = models["tiny"]
    indexers = [attn.indexer for attn in attention_modules(model) if attn.indexer is not None]
    with pytest.raises(RuntimeError, match="planted"), forced_chunks(rows=5), use_backend(model, "reference"):
        assert all("forward" in vars(ix) for ix in indexers)
        assert model.config._attn_implementation == ABSORBED_IMPL
        raise RuntimeError("planted")
    assert all("forward" not in vars(ix) for ix in indexers) and model.config._attn_implementation == "sdpa"
    with use_backend(model, "hf_sdpa"):
        assert all("forward" not in vars(ix) for ix in indexers)  # the dense path stays transformers' own
    for bad in (0, -3, True, 2.5):
        with pytest.raises(ValueError, match=f"rows must be a positive int, got {bad!r}"), \
                forced_chunks(rows=bad), use_backend(model, "reference"):
            pass


class _Allocations(TorchDispatchMode):
    """The largest storage any op allocates and the peak of live op-allocated bytes (CPU), while active."""

    def __init__(self):
        super().__init__()
        self.live, self.now, self.peak, self.largest = {}, 0, 0, 0

    def _free(self, key):
        self.now -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr():
                storage = t.untyped_storage()
                key = (storage.data_ptr(), id(storage))
                if key not in self.live:
                    self.live[key] = size = storage.nbytes()
                    self.now += size
                    weakref.finalize(storage, self._free, key)
                    self.peak, self.largest = max(self.peak, self.now), max(self.largest, size)
        return out


def _measure(model, tokens: int, index_budget_bytes: int = INDEX_BUDGET_BYTES, **kw) -> _Allocations:
    """Allocations of one forward under the fp32 reference with token chunks of 64 KiB (its own budget)."""
    ids = _prompt(model, tokens)
    backend = Backend("reference", functools.partial(sparse_mla_reference, dtype=torch.float32, budget_bytes=2**16),
                      "fp32 reference, small token chunks", fp32_output=True)
    with forced_chunks(budget_bytes=index_budget_bytes), use_backend(model, backend, **kw), torch.inference_mode(), \
            _Allocations() as seen:
        model(ids, logits_to_keep=1)
    return seen


@pytest.fixture(scope="module")
def chunked_allocations(models):
    """tokens -> allocations of tiny's forward with 32-row indexer chunks (a 64 KiB budget at these lengths)."""
    return {tokens: _measure(models["tiny"], tokens, index_budget_bytes=2**16) for tokens in (128, 512)}


def test_no_allocation_grows_with_t_squared_on_the_absorbed_path(models, chunked_allocations):
    short, long = chunked_allocations[128], chunked_allocations[512]
    assert long.largest <= 4.2 * short.largest and long.peak <= 4.2 * short.peak  # 4x the tokens: linear
    # the plan's estimate grows at least as fast as the measured peak (weights and constants cancel)
    plan = [activation_bytes(models["tiny"].config, 1, t, index_budget_bytes=2**16) for t in (128, 512)]
    assert long.peak - short.peak <= plan[1] - plan[0]


def test_the_measurement_sees_transformers_t_squared_indexer(models, chunked_allocations):
    dense = _measure(models["tiny"], 512, chunked_indexer=False)
    index_heads = models["tiny"].config.index_n_heads
    assert dense.largest >= 4 * index_heads * 512 ** 2 >= 4 * chunked_allocations[512].largest  # [T, Hi, T] fp32


def test_plan_is_linear_in_t_on_the_absorbed_path_and_fits_glm52_at_65536():
    config = make_config("glm-5.2", layers=4, experts=16)
    for tp in (1, 8):
        sizes = [activation_bytes(config, tp, t) for t in (16384, 32768, 65536, 131072)]
        assert all(b / a <= 2.01 for a, b in itertools.pairwise(sizes))  # linear (the 1 GiB indexer chunk is fixed)
        dense = [activation_bytes(config, tp, t, "hf_sdpa") for t in (16384, 32768)]
        assert dense[1] / dense[0] > 3.5  # [T, T] masks and indexer scores: quadratic
    plan = plan_memory(config, 8, 65536)
    assert plan.fits and plan.path == "absorbed" and plan.max_tokens >= 65536 and plan.activations_gib < 60
    assert not plan_memory(config, 8, 65536, path="hf_sdpa").fits
    # measured on an H200 (one process, --tp 8 emulated, triton_sparse_mla): 56.1 GiB of activations at 65536
    # and 84.1 GiB at 98304; the plan must not be below them
    assert 56.1 * GIB <= activation_bytes(config, 1, 65536) <= 1.4 * 56.1 * GIB
    assert activation_bytes(config, 1, 98304) >= 84.1 * GIB


def test_check_fits_refuses_dense_backends_past_their_limit(monkeypatch):
    config = make_config("glm-5.2", layers=4, experts=16)
    monkeypatch.setattr(plan_module, "device_bytes", lambda device: 141 * 10**9)
    gpu = torch.device("cuda", 0)
    check_fits(config, 65536, gpu, backends=["reference", "triton_sparse_mla", "band:0"])
    check_fits(config, 16384, gpu, backends=["hf_sdpa"])
    with pytest.raises(ValueError) as err:
        check_fits(config, 65536, gpu, backends=["reference", "hf_sdpa"])
    message = str(err.value)
    assert message.startswith("--tokens 65536: backend hf_sdpa (transformers' dense attention") and "\n" not in message
    limit = int(message.split("fits up to ")[1].split(" tokens")[0].replace(",", ""))
    assert 16384 <= limit < 32768
    check_fits(config, limit, gpu, backends=["hf_sdpa"])
    with pytest.raises(ValueError, match=f"--tokens {limit + 1}: backend hf_sdpa"):
        check_fits(config, limit + 1, gpu, backends=["hf_sdpa"])
    with pytest.raises(ValueError, match=r"--tokens 40000: backend hf_eager .* fits up to"):
        check_fits(config, 40000, gpu, backends=["hf_eager"])
    with pytest.raises(ValueError, match="--tokens 262144: a prefill of 4 layers needs about"):
        check_fits(config, 262144, gpu)


def test_plan_command_prints_every_path(capsys):
    from glmcheck import cli

    assert cli.main(["plan", "--model", "glm-5.2", "--layers", "4", "--experts", "16", "--tp", "8", "--tokens", "65536",
                     "--gpu-gib", "141"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 120, out
    fits = plan_cells(out)["fits 141 GiB"]
    assert fits == {"absorbed (every swapped backend)": "yes", "hf_sdpa (dense)": "no", "hf_eager (dense)": "no"}
    assert out.startswith("glm-5.2: 4 layers at --tp 8, bf16 weights, one prefill of 65536 tokens")


def test_plan_calls_prefill_is_todays_plan():
    """`--calls prefill` (the default): no pool column, term or record field; each total is the three terms."""
    report = memory_plan("glm-5.2", tp=8, tokens=4096)
    assert memory_plan("glm-5.2", tp=8, tokens=4096, calls="prefill").render() == report.render()
    assert list(plan_cells(report.render())) == [
        "params total", "params / rank", "weights / rank", "activations @4096", "total / rank", "fits 141 GiB",
        "max layers that fit", "max tokens that fit"]
    assert "pool" not in report.render() and "calls" not in report.options
    for row in report.rows:
        assert "pool_gib" not in row and "pool_rows" not in row
        assert row["total_gib_per_rank"] == row["weights_gib_per_rank"] + row["transient_gib"] + row["activations_gib"]


def test_plan_calls_serving_adds_the_gpu_pool_on_the_absorbed_path():
    """glm-5.2 at TP 8, 4096 tokens: the GPU's default pool (2^22 rows of d_qk 576) on the absorbed row, exactly
    `pool_memory`'s bytes, its FP8 form larger; the dense hf_* rows are called one-shot and hold none."""
    prefill = memory_plan("glm-5.2", tp=8, tokens=4096)
    serving = memory_plan("glm-5.2", tp=8, tokens=4096, calls="serving")
    fp8 = memory_plan("glm-5.2", tp=8, tokens=4096, calls="serving", kv_cache_dtype="fp8_e4m3")
    for report, row_bytes in ((serving, None), (fp8, 656)):
        absorbed = report.rows[0]
        assert absorbed["pool_rows"] == GPU_POOL_ROWS == 2**22
        assert absorbed["pool_gib"] * GIB == pool_memory(GPU_POOL_ROWS, 576, row_bytes)
        added = absorbed["total_gib_per_rank"] - prefill.rows[0]["total_gib_per_rank"]
        assert abs(added * GIB - pool_memory(GPU_POOL_ROWS, 576, row_bytes)) < 1e3
        assert [row["pool_gib"] for row in report.rows[1:]] == [0, 0]
        assert [row["total_gib_per_rank"] for row in report.rows[1:]] == [
            row["total_gib_per_rank"] for row in prefill.rows[1:]]
        pool = plan_cells(report.render())["serving pool"]
        assert list(pool.values())[1:] == ["-", "-"] and f"{2**22:,} rows" in report.render()
        assert pool["absorbed (every swapped backend)"] == f"{absorbed['pool_gib']:.1f} GiB"
        assert report.options["calls"] == "serving"
    assert fp8.rows[0]["pool_gib"] > serving.rows[0]["pool_gib"] > 4
    widest = memory_plan("glm-5.2", tp=8, tokens=4096, weights="fp8", calls="serving", kv_cache_dtype="fp8_e4m3")
    assert max(len(line) for line in widest.render().splitlines()) <= 120  # every term of the widest plan


def test_plan_calls_serving_fits_fewer_tokens_and_follows_the_pool_rows():
    """The largest prompt that fits is no longer with the pool (FP8 weights resident: it fits); a given --pool-rows
    caps it where its pages run out; a default pool grows with the prompt (Setup's rule, `serving_pool`)."""
    longest = {calls: memory_plan("glm-5.2", tp=8, tokens=4096, weights="fp8", calls=calls).rows[0]["max_tokens"]
               for calls in ("prefill", "serving")}
    assert 4096 < longest["serving"] < longest["prefill"]
    fp8_pool = memory_plan("glm-5.2", tp=8, tokens=4096, weights="fp8", calls="serving", kv_cache_dtype="fp8_e4m3")
    assert fp8_pool.rows[0]["max_tokens"] < longest["serving"]
    capped = memory_plan("glm-5.2", tp=8, tokens=4096, weights="fp8", calls="serving", pool_rows=16384)
    assert capped.rows[0]["max_tokens"] == 16384 - filler_rows(2048)  # the prompt's pages and one other request's
    config = make_config("glm-5.2")
    fills_half = 2**21 - filler_rows(2048)  # the prompt's pages and the other request's: half the default pool
    assert serving_pool(config, EngineShape(), fills_half, "cuda")[0] == GPU_POOL_ROWS
    assert serving_pool(config, EngineShape(), fills_half + 1, "cuda")[0] == GPU_POOL_ROWS + 128  # a page more, x2
    assert serving_pool(config, EngineShape(), 64, "cpu")[0] == CPU_POOL_ROWS  # a check's default on the CPU


def test_plan_refuses_bad_serving_options_naming_the_argument():
    for options, words in (({"calls": "batch"}, "calls must be one of prefill, serving"),
                           ({"pool_rows": 4096}, "pool_rows shape the engine's calls: give them with calls serving"),
                           ({"calls": "serving", "pool_rows": 100}, "pool_rows must be a multiple of 64"),
                           ({"calls": "serving", "pool_rows": 64}, "pool_rows 64: the prompt's pages"),
                           ({"calls": "serving", "requests": 65}, "requests must be at most 64"),
                           ({"calls": "serving", "kv_cache_dtype": "fp8"}, "kv_cache_dtype must be one of"),
                           ({"kv_cache_dtype": "fp8_e4m3"}, "kv_cache_dtype fp8_e4m3 sizes the pool of calls serving")):
        with pytest.raises(ValueError, match=words):
            memory_plan("glm-5.2", tp=8, tokens=4096, **options)
