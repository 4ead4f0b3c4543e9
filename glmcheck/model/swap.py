"""The attention swap: run a GLM-MoE-DSA model's DSA prefill attention through any backend.

`use_backend(model, name, tp=...)` is a context manager. For absorbed backends it registers
glmcheck's attention function with transformers' public `AttentionInterface` (and, with
`AttentionMaskInterface`, `glmcheck.model.indexer_chunks.absorbed_mask`: a causal mask that
costs no memory per position), switches the model to it with `set_attn_implementation`, makes
each full layer's indexer compute its top-k in query chunks (`indexer_chunks.chunked_topk`:
transformers' top-k bit for bit, transient memory within a fixed budget instead of T^2; the
module's own forward with `chunked_indexer=False`, which also restores the sdpa [T, T] mask),
and hooks each attention module's `kv_a_layernorm` to see the latent rows. Nothing on this path
grows with T^2. Every DSA layer ("full" and "shared" indexer layers alike) then computes:

    q_abs = (q_nope @ W_UK) ++ q_rope        [T, H, L+R]   (rounded to bf16 once)
    kv    = latent ++ k_rope                 [T, L+R]      (optionally through the FP8 pool)
    out   = backend(q_abs, kv, indices)      [T, H, L]     (as tp rank slices of H/tp heads)
    value = out @ W_UVᵀ                      [T, H, V]     -> o_proj

The model's own indexer runs once per "full" layer; its top-k is mapped to the kernel convention
(index > t -> -1) and handed unchanged to the backend. A "shared" layer receives the very tensor
its full layer selected, so the session reuses that layer's kernel indices and, for a backend
with a planner, its plan per rank slice (`reuse_plans`; `plan_builds` counts builds per layer).
`topk_length=True` also passes each token's count of valid slots (they form a prefix: the indexer's
top-k is sorted, masked positions last). `time_attention=True` times each layer's backend calls
with CUDA events (`attention_ms`). With tp > 1 a hook on each o_proj adds the rank partial sums
in rank order, as an all-reduce would (for hf backends too).
With `engine` (`--calls serving`) each backend is called as an engine's extend calls it instead
(`glmcheck.model.engine_calls`: chunks over a paged pool, packed requests, topk_length).
`hf_eager` / `hf_sdpa` run the model unswapped (transformers' dense masked path, [T, T] masks and
scores: `glmcheck.model.memory` bounds their length). Everything is restored on exit, also after an
exception.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AttentionMaskInterface

from glmcheck.backends import Backend, get_backend
from glmcheck.backends.errors import KernelFault, first_line
from glmcheck.backends.flashmla_kv import release_pool
from glmcheck.kernels.fp8 import dequantize_kv_pool, quantize_kv_pool
from glmcheck.model.absorbed import absorb_query, expand_values, kernel_indices, kv_rows, split_kv_b
from glmcheck.model.clock import AttentionClock
from glmcheck.model.engine_calls import EngineCalls, LayerCall, run_engine_layer
from glmcheck.model.engine_pool import EnginePool
from glmcheck.model.indexer_chunks import absorbed_mask, install_chunked_indexer
from glmcheck.model.kernel_call import KernelCall, check_output
from glmcheck.process.interrupts import raised_by_code, signals_told_apart

ABSORBED_IMPL = "glmcheck_absorbed"  # absorbed attention, chunked indexer, causal stand-in mask
ABSORBED_HF_INDEXER_IMPL = "glmcheck_absorbed_hf_indexer"  # the same with transformers' indexer and sdpa mask
HF_BACKENDS = {"hf_eager": "eager", "hf_sdpa": "sdpa"}
KV_CACHE_DTYPES = (None, "bf16", "fp8_e4m3")

Listener = Callable[[int, str, torch.Tensor], None]  # (layer index, what, tensor)


# (layer, batch, seq, topk, device) -> a replacement top-k [batch, seq, topk] int32 in the indexer's convention
Selector = Callable[[int, int, int, int, torch.device], torch.Tensor]


@dataclass
class SwapSession:
    """State of one `use_backend` context: the backend, TP degree and call counters."""

    name: str
    backend: Backend | None
    tp: int
    kv_cache_dtype: str | None
    dense_threshold: int | None
    reuse_plans: bool = True
    topk_length: bool = False
    clock: AttentionClock | None = None
    calls: Counter = field(default_factory=Counter)
    plan_builds: Counter = field(default_factory=Counter)
    dense_layers: set = field(default_factory=set)
    listeners: list[Listener] = field(default_factory=list)
    recorded: list[KernelCall] | None = None  # with record_calls: one call per distinct `KernelCall.key`
    engine: EngineCalls | None = None  # --calls serving (`glmcheck.model.engine_calls`)
    pool: EnginePool | None = None  # ... this forward's pool, made at its first layer
    _latents: dict = field(default_factory=dict)
    _selection: tuple | None = None  # (the indexer's top-k tensor, its kernel indices, lengths, plans per rank)

    @property
    def absorbed(self) -> bool:
        return self.backend is not None

    def notify(self, layer: int, what: str, tensor: torch.Tensor) -> None:
        for listener in self.listeners:
            listener(layer, what, tensor)

    def attend(self, module, query: torch.Tensor, key: torch.Tensor, topk: torch.Tensor,
               scaling: float) -> torch.Tensor:
        """One layer's absorbed attention; returns the value output [B, S, H, V]."""
        batch, heads, seq, _ = query.shape
        nope, latent_dim = module.qk_nope_head_dim, module.kv_lora_rank
        w_uk, w_uv = split_kv_b(module.kv_b_proj.weight, heads, nope, module.v_head_dim)
        latent = self._latents.pop(module.layer_idx)
        # q_abs [B, S, H, L+R] bf16 filled in place: the same bits as rounding the fp32 concatenation, without it
        q_abs = query.new_empty((batch, seq, heads, latent_dim + query.shape[-1] - nope), dtype=torch.bfloat16)
        q_abs[..., :latent_dim] = absorb_query(query[..., :nope], w_uk)
        q_abs[..., latent_dim:] = query[..., nope:].transpose(1, 2).float()
        q_abs = q_abs.view(batch * seq, heads, -1)
        rows = kv_rows(latent.to(torch.bfloat16), key[:, 0, :, nope:].to(torch.bfloat16))
        codes = None
        if self.kv_cache_dtype == "fp8_e4m3":  # the pool engines store; a bf16 kernel reads it dequantised
            rope = rows.shape[-1] - latent_dim
            codes = quantize_kv_pool(rows, d_rope=rope)
            rows = dequantize_kv_pool(codes, rows.shape[0], d_rope=rope)
        indices, lengths, plans = self._kernel_selection(topk)
        self.notify(module.layer_idx, "indices", indices)
        if self.engine is not None:  # --calls serving
            flat = None if codes is None else codes.view(-1, codes.shape[-1])[:rows.shape[0]]
            out_latent = run_engine_layer(self, LayerCall(module.layer_idx, q_abs, rows, flat, indices, lengths,
                                                          scaling, latent_dim, plans))
        else:
            out_latent = self._run_ranks(module.layer_idx, q_abs, rows, indices, lengths, plans, scaling, latent_dim)
        self.notify(module.layer_idx, "latent_out", out_latent)
        values = expand_values(out_latent, w_uv).to(query.dtype)
        return values.view(batch, seq, heads, -1)

    def _kernel_selection(self, topk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, dict]:
        """(kernel indices, lengths or None, plans by rank) for this top-k: the previous layer's when
        it selected this very tensor (a shared layer), else new (plans are then built on first use)."""
        if self._selection is not None and self._selection[0] is topk:
            return self._selection[1:]
        indices = kernel_indices(topk)
        lengths = (indices >= 0).sum(dim=1, dtype=torch.int32) if self.topk_length else None
        self._selection = (topk, indices, lengths, {})
        return self._selection[1:]

    def _run_ranks(self, layer: int, q_abs: torch.Tensor, rows: torch.Tensor, indices: torch.Tensor,
                   lengths: torch.Tensor | None, plans: dict, scaling: float, latent_dim: int) -> torch.Tensor:
        """Call the backend once per TP rank on its H/tp heads; their outputs fill [T, H, d_v] in head order.
        The clock's span holds the backend calls and plan builds only: each rank's query slice is made contiguous
        before it and the outputs are joined after it, copies that only this one-process emulation of TP makes
        (a rank's own heads are contiguous on its GPU, and its o_proj shard reads its output as it is)."""
        per_rank = q_abs.shape[1] // self.tp
        q_ranks = [q_abs] if self.tp == 1 else [q_abs[:, rank * per_rank:(rank + 1) * per_rank].contiguous()
                                                 for rank in range(self.tp)]
        with self.clock.span(layer, q_abs.device) if self.clock is not None else contextlib.nullcontext():
            parts = [self._one_shot(layer, q_rank, rows, indices, lengths, plans, rank, scaling, latent_dim)
                     for rank, q_rank in enumerate(q_ranks)]
        return parts[0] if self.tp == 1 else torch.cat(parts, dim=1)

    def _one_shot(self, layer: int, q_rank: torch.Tensor, rows: torch.Tensor, indices: torch.Tensor,
                  lengths: torch.Tensor | None, plans: dict, rank: int, scaling: float, latent_dim: int
                  ) -> torch.Tensor:
        """Rank `rank`'s one-shot call of the layer (its plan built on first use), its output checked."""
        plan = plans.get(rank) if self.reuse_plans else None
        if plan is None and self.backend.planner is not None:
            plan = self.backend.plan(indices, rows.shape[0], q_rank.shape[1], lengths)
            plans[rank] = plan
            self.plan_builds[layer] += 1
        if rank == 0 and self.recorded is not None:
            self._record(KernelCall(q_rank, rows, indices, lengths, scaling, latent_dim))
        part = self._call(q_rank, rows, indices, scaling, latent_dim, lengths, plan)
        if self.engine is None:  # engine-shaped: its calls are the chunks'
            self.calls[layer] += 1
        check_output(self.name, part, q_rank, latent_dim, self.backend.fp32_output)
        return part

    def _record(self, call: KernelCall) -> None:
        if all(seen.key() != call.key() for seen in self.recorded):
            self.recorded.append(call)

    def _call(self, q, rows, indices, scaling, latent_dim, lengths, plan) -> torch.Tensor:
        """One backend call; a plug-in that raises anything, `SystemExit` and a `KeyboardInterrupt` of its own
        included, is a KernelFault naming it (glmcheck's own raise as they are; a signal to the process stops the run:
        `glmcheck.process.interrupts`)."""
        if self.backend.built_in:
            return self.backend(q, rows, indices, scaling, latent_dim, topk_length=lengths, plan=plan)
        with signals_told_apart() as told_apart:
            try:
                return self.backend(q, rows, indices, scaling, latent_dim, topk_length=lengths, plan=plan)
            except BaseException as err:  # SystemExit, a raised KeyboardInterrupt: the plug-in's FAIL
                if isinstance(err, torch.OutOfMemoryError) or not raised_by_code(err, told_apart):
                    raise
                raise KernelFault(self.name, f"raised {type(err).__name__}: {first_line(err)}") from err


_SESSIONS: dict[int, SwapSession] = {}  # id(attention module) -> active session


def _absorbed_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                        indices=None, **kwargs):
    """transformers attention-interface entry point for swapped DSA layers."""
    session = _SESSIONS.get(id(module))
    if session is None:
        raise RuntimeError(f"{ABSORBED_IMPL} attention called outside glmcheck.model.use_backend")
    if indices is None:
        raise RuntimeError("the model did not pass DSA top-k indices to the attention function")
    return session.attend(module, query, key, indices, scaling), None


AttentionInterface.register(ABSORBED_IMPL, _absorbed_attention)
AttentionMaskInterface.register(ABSORBED_IMPL, absorbed_mask)
AttentionInterface.register(ABSORBED_HF_INDEXER_IMPL, _absorbed_attention)
AttentionMaskInterface.register(ABSORBED_HF_INDEXER_IMPL, AttentionMaskInterface()["sdpa"])


def attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The DSA attention module of every decoder layer, in layer order."""
    return [layer.self_attn for layer in model.model.layers]


def _rank_sum_hook(tp: int) -> Callable:
    """o_proj forward hook: partial products of each rank's input columns, summed in rank order. The weight is read
    once (under --weights fp8 each read of a resident weight dequantises the whole matrix)."""

    def hook(module, args, output):
        x, weight = args[0], module.weight
        cols = x.shape[-1] // tp
        total = None
        for rank in range(tp):
            part = F.linear(x[..., rank * cols:(rank + 1) * cols], weight[:, rank * cols:(rank + 1) * cols])
            total = part if total is None else total + part
        return total if module.bias is None else total + module.bias

    return hook


def _latent_hook(session: SwapSession, layer_idx: int) -> Callable:
    def hook(module, args, output):
        session._latents[layer_idx] = output
    return hook


def _dense_hook(session: SwapSession, layer_idx: int, threshold: int) -> Callable:
    """Indexer forward hook: for KV length <= threshold select every position (dense attention)."""

    def hook(module, args, output):
        batch, seq = output.shape[0], output.shape[1]
        if seq > threshold:
            return output
        session.dense_layers.add(layer_idx)
        every = torch.arange(seq, dtype=output.dtype, device=output.device)
        return every.view(1, 1, seq).expand(batch, seq, seq).contiguous()

    return hook


def _selector_hook(layer_idx: int, selector: Selector) -> Callable:
    """Indexer forward hook: its top-k [B, S, K] replaced by selector(layer, B, S, K, device)."""

    def hook(module, args, output):
        batch, seq, topk = output.shape
        chosen = selector(layer_idx, batch, seq, topk, output.device)
        if tuple(chosen.shape) != (batch, seq, topk) or chosen.dtype != output.dtype:
            raise ValueError(f"the index selector must return [{batch}, {seq}, {topk}] {output.dtype}, got "
                             f"{list(chosen.shape)} {chosen.dtype}")
        return chosen

    return hook


def check_tp(model: torch.nn.Module, tp: int) -> int:
    """Validate the TP degree against the head count; returns heads per rank."""
    heads = model.config.num_attention_heads
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or heads % tp:
        raise ValueError(f"tp must be a positive int dividing the {heads} attention heads, got {tp!r}")
    return heads // tp


@contextlib.contextmanager
def use_backend(model: torch.nn.Module, backend: str | Backend, *, tp: int = 1,
                kv_cache_dtype: str | None = None, dense_threshold: int | None = None,
                deterministic: bool = False, reuse_plans: bool = True, topk_length: bool = False,
                clock: AttentionClock | None = None, selector: Selector | None = None,
                chunked_indexer: bool = True, record_calls: bool = False,
                engine: EngineCalls | None = None) -> Iterator[SwapSession]:
    """Run `model`'s DSA attention through `backend` inside the block (see module docstring).

    kv_cache_dtype "fp8_e4m3" writes the KV rows to the FP8 pool engines store (`glmcheck.kernels.fp8`: e4m3
    latent with an fp32 scale per 128 values, rope in bf16) and hands the backends its dequantised rows (absorbed
    backends only; `band:K` is then the band's FP8 variant, `band_kernels.fp8_band_variant`);
    dense_threshold N makes each indexer select every position when the KV length is <= N, so
    those layers attend densely (every causal row) under every backend, hf ones included;
    deterministic asks Triton backends for batch-invariant results (union off); reuse_plans
    False builds a plan for every call; topk_length passes each token's valid-slot count; clock
    times each layer's attention; selector replaces every indexer's top-k (e.g. calibrated
    indices for timing runs; every backend sees them, hf ones included). Absorbed backends only:
    chunked_indexer (default) computes each full layer's top-k a chunk of query rows at a time (as many as keep
    one chunk's transient scores within a fixed budget, `indexer_chunks.chunk_rows`); False runs transformers' own
    indexer on the [T, T] sdpa mask (the same top-k, T^2 memory). record_calls keeps the backend's calls
    (`SwapSession.recorded`: rank 0's, one per distinct shape; their tensors stay alive with the session).
    engine (absorbed backends) calls each backend as an engine's extend does, `glmcheck.model.engine_calls`.
    """
    check_tp(model, tp)
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype must be one of bf16, fp8_e4m3, got {kv_cache_dtype!r}")
    if selector is not None and dense_threshold is not None:
        raise ValueError("selector and dense_threshold both replace the indexer's top-k; give one of them")
    name = backend if isinstance(backend, str) else backend.name
    if name in HF_BACKENDS:
        backend_obj = None
    else:
        backend_obj = (get_backend(name, deterministic=deterministic, kv_cache_dtype=kv_cache_dtype)
                       if isinstance(backend, str) else backend)
    session = SwapSession(name, backend_obj, tp, kv_cache_dtype, dense_threshold, reuse_plans, topk_length, clock,
                          recorded=[] if record_calls else None, engine=engine)
    chunked = session.absorbed and chunked_indexer
    previous = model.config._attn_implementation
    handles, restores = [], []
    try:
        model.set_attn_implementation(HF_BACKENDS.get(name, ABSORBED_IMPL if chunked else ABSORBED_HF_INDEXER_IMPL))
        for attn in attention_modules(model):
            if chunked and attn.indexer is not None:
                restores.append(install_chunked_indexer(attn.indexer))
            if dense_threshold is not None and attn.indexer is not None:
                handles.append(attn.indexer.register_forward_hook(_dense_hook(session, attn.layer_idx,
                                                                              dense_threshold)))
            if selector is not None and attn.indexer is not None:
                handles.append(attn.indexer.register_forward_hook(_selector_hook(attn.layer_idx, selector)))
            if session.absorbed:
                _SESSIONS[id(attn)] = session
                handles.append(attn.kv_a_layernorm.register_forward_hook(_latent_hook(session, attn.layer_idx)))
            if tp > 1:
                handles.append(attn.o_proj.register_forward_hook(_rank_sum_hook(tp)))
        yield session
    finally:
        for restore in restores:
            restore()
        for handle in handles:
            handle.remove()
        for attn in attention_modules(model):
            _SESSIONS.pop(id(attn), None)
        session._latents.clear()
        session._selection = None
        if session.pool is not None:
            session.pool = None
            release_pool()
        model.set_attn_implementation(previous)
