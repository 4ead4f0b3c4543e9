"""Model-level prefill latency: a whole forward per backend, per prompt length (GPU).

Each length is visited twice and the second visit is reported (the first pays Triton's JIT
and the allocator's growth); each reported time is the median of `repeats` forwards. The
kernel invocation count per forward is reported beside it, so a silent no-op cannot look like
a win.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from glmcheck.checks.runner import SwapOptions, forward_under
from glmcheck.data.prompts import seeded_prompt


@dataclass(frozen=True)
class PrefillTiming:
    backend: str
    tokens: int
    median_ms: float
    kernel_calls: int


def _timed_forward(model, ids: torch.Tensor, backend: str, options: SwapOptions) -> tuple[float, int]:
    if ids.device.type == "cuda":
        torch.cuda.synchronize(ids.device)
    start = time.perf_counter()
    run = forward_under(model, ids, backend, options)
    return (time.perf_counter() - start) * 1e3, sum(run.calls.values())


def bench_prefill(model, lengths: list[int], backends: list[str], options: SwapOptions = SwapOptions(),
                  repeats: int = 5, seed: int = 0, progress=None) -> list[PrefillTiming]:
    """Median whole-prefill ms per (backend, length), second visit reported."""
    results: list[PrefillTiming] = []
    device = next(model.parameters()).device
    for visit in (1, 2):
        for tokens in lengths:
            ids = seeded_prompt(model.config.vocab_size, tokens, seed + tokens, device)
            for backend in backends:
                samples = [_timed_forward(model, ids, backend, options) for _ in range(repeats if visit == 2 else 1)]
                if visit == 2:
                    results.append(PrefillTiming(backend, tokens, statistics.median(s[0] for s in samples),
                                                 samples[-1][1]))
                if progress is not None:
                    progress.update(1)
    return results
