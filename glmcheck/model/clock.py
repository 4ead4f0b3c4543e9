"""Attention time inside a forward: spans around each layer's backend calls, CUDA events on a GPU.

`AttentionClock.span(layer, device)` brackets one layer's attention (every rank slice, plan builds
included). On CUDA it records a pair of events on the current stream, so the forward is never
synchronised; `layer_ms()` synchronises once and reads them. On the CPU it reads the wall clock.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator

import torch


class AttentionClock:
    """Milliseconds of attention per layer, summed over the spans recorded since `reset()`."""

    def __init__(self) -> None:
        self._events: dict[int, list] = defaultdict(list)
        self._wall: dict[int, float] = defaultdict(float)

    def reset(self) -> None:
        self._events.clear()
        self._wall.clear()

    @contextlib.contextmanager
    def span(self, layer: int, device: torch.device) -> Iterator[None]:
        if device.type != "cuda":
            start = time.perf_counter()
            yield
            self._wall[layer] += (time.perf_counter() - start) * 1e3
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        end.record()
        self._events[layer].append((start, end))

    def layer_ms(self) -> dict[int, float]:
        """{layer: attention ms} (synchronises with the GPU once when CUDA spans were recorded)."""
        times = dict(self._wall)
        if self._events:
            torch.cuda.synchronize()
            for layer, pairs in self._events.items():
                times[layer] = times.get(layer, 0.0) + sum(start.elapsed_time(end) for start, end in pairs)
        return dict(sorted(times.items()))
