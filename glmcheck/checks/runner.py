"""One model forward under one backend, with the requested captures."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from glmcheck.backends.errors import KernelFault
from glmcheck.checks.capture import Captured, capture
from glmcheck.model import use_backend
from glmcheck.model.clock import AttentionClock
from glmcheck.model.engine_calls import EngineCalls
from glmcheck.model.kernel_call import KernelCall
from glmcheck.process.phases import CLOCK
from glmcheck.startup import compile_ahead


@dataclass(frozen=True)
class SwapOptions:
    """How backends are swapped in: TP degree, KV-cache emulation, dense threshold, determinism, plan
    reuse, topk_length, an index selector replacing the indexer's top-k, engine-shaped calls (see `use_backend`)."""

    tp: int = 1
    kv_cache_dtype: str | None = None
    dense_threshold: int | None = None
    deterministic: bool = False
    reuse_plans: bool = True
    topk_length: bool = False
    selector: Callable | None = None
    engine: EngineCalls | None = None  # --calls serving; None: one-shot prefill


@dataclass
class BackendRun:
    """What one forward under one backend produced."""

    name: str
    captured: Captured
    calls: Counter
    absorbed: bool
    dense_layers: set = field(default_factory=set)
    seconds: float = 0.0
    plan_builds: Counter = field(default_factory=Counter)
    attention_ms: dict[int, float] | None = None  # per layer, when the forward was timed
    kernel_calls: list[KernelCall] = field(default_factory=list)  # with record_calls (`use_backend`)

    def missing_calls(self, num_layers: int, tp: int) -> tuple[int, int]:
        """(expected, seen) kernel calls when an absorbed backend ran fewer than tp per layer."""
        if not self.absorbed:
            return 0, 0
        expected = num_layers * tp
        seen = sum(min(self.calls[layer], tp) for layer in range(num_layers))
        return (expected, sum(self.calls.values())) if seen < expected else (0, 0)


def _gather_shards(got: Captured) -> None:
    """Under torchrun, per-head captures hold this rank's heads: gather all heads in rank order."""
    from glmcheck.model import distributed

    ctx = distributed.current()
    if ctx is None:
        return
    for store in (got.latent, got.value):
        for layer in list(store):
            store[layer] = distributed.gather_heads(store[layer], ctx)


def forward_under(model: torch.nn.Module, input_ids: torch.Tensor, backend: str, options: SwapOptions, *,
                  latent_layers=(), value_layers=(), hidden_layers=(), index_layers=(),
                  last_logits: int = 1, time_attention: bool = False, record_calls: bool = False) -> BackendRun:
    """Run `model(input_ids)` with `backend` swapped in; capture what was asked (on the model's device);
    `time_attention` also times each layer's attention calls (`BackendRun.attention_ms`); `record_calls` keeps the
    backend's calls (`BackendRun.kernel_calls`, for `glmcheck.startup.compile_ahead`)."""
    clock = AttentionClock() if time_attention else None
    start = time.perf_counter()
    with use_backend(model, backend, tp=options.tp, kv_cache_dtype=options.kv_cache_dtype,
                     dense_threshold=options.dense_threshold, deterministic=options.deterministic,
                     reuse_plans=options.reuse_plans, topk_length=options.topk_length, clock=clock,
                     selector=options.selector, record_calls=record_calls, engine=options.engine) as session, \
            capture(model, session, latent_layers=latent_layers, value_layers=value_layers,
                    hidden_layers=hidden_layers, index_layers=index_layers) as got, torch.inference_mode():
        output = model(input_ids, logits_to_keep=last_logits, use_cache=False)  # a prefill: no KV cache to keep
        if last_logits:
            got.record_logits(output.logits, last=last_logits)
    if input_ids.device.type == "cuda":
        torch.cuda.synchronize(input_ids.device)
    _gather_shards(got)
    seconds = time.perf_counter() - start
    CLOCK.add_forward(backend, seconds)
    return BackendRun(backend, got, Counter(session.calls), session.absorbed, set(session.dense_layers), seconds,
                      Counter(session.plan_builds), clock.layer_ms() if clock is not None else None,
                      list(session.recorded or ()))


def forward_each(model: torch.nn.Module, input_ids: torch.Tensor, names: list[str], options: SwapOptions,
                 own: int, check_own: Callable[[str, BackendRun], None], progress=None, **captures
                 ) -> tuple[list[BackendRun], dict[str, KernelFault]]:
    """`forward_under` for each of `names` in order (the same `captures` each), `progress` updated once a forward.
    The first `own` names are glmcheck's own (the exact reference, its rerun, the band): `check_own(name, run)`
    sees each of their runs (NaN there is bad input) and a KernelFault of theirs is raised. Of the rest a
    KernelFault is kept by name: that backend's FAIL. Returns (runs of the names that ran, in order; faults).
    After the first forward the others' Triton kernels are compiled in threads (`compile_ahead.after`)."""
    runs: list[BackendRun] = []
    faults: dict[str, KernelFault] = {}
    ahead = compile_ahead.enabled(input_ids.device)
    for position, name in enumerate(names):
        try:
            run = forward_under(model, input_ids, name, options, record_calls=ahead and position == 0, **captures)
            if position == 0:
                compile_ahead.after(run, names[1:], options)
        except KernelFault as fault:
            if position < own:
                raise
            faults[name] = fault
        else:
            if position < own:
                check_own(name, run)
            runs.append(run)
        if progress is not None:
            progress.update(1)
    return runs, faults
