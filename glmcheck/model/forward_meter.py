"""Time and peak memory of each top-level forward of a model, from hooks on it (`ForwardMeter`).

On CUDA each forward is bracketed by synchronisations; its peak is the caching allocator's (`max_memory_allocated`,
reset before the forward) and the device's: the allocator's reserved peak plus what the device holds outside the
allocator (the CUDA context, libraries' own buffers: used memory less reserved, read after the forward). Between
forwards (the checks' comparisons) the peaks are kept too. On the CPU the device peak is the process's peak resident
set (ru_maxrss), which cannot be reset: each forward reports the process's peak so far; there is no allocator peak.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass

import torch

ATTENTION_PATHS = {"sdpa": "hf_sdpa", "eager": "hf_eager"}  # transformers' own attention; anything else: absorbed


@dataclass(frozen=True)
class ForwardRecord:
    """One forward: prompt length, attention path (`glmcheck.model.memory.PATHS`), wall seconds, peak bytes of
    the allocator (None on the CPU) and of the device."""

    tokens: int
    path: str
    seconds: float
    allocated: int | None
    device: int


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _cpu_peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


class ForwardMeter:
    """Hooks on `model` recording a `ForwardRecord` per forward (`records`); `close()` removes them."""

    def __init__(self, model: torch.nn.Module, device: torch.device, say=None):
        """`say(line)`, when given, is told each forward's measurements as soon as it ends (a run that fails later
        has said what it measured)."""
        self.model, self.device, self.say = model, torch.device(device), say
        self.records: list[ForwardRecord] = []
        self.between = (0, 0)  # (allocated, device) peaks outside the forwards so far
        self._start = 0.0
        self._handles = [model.register_forward_pre_hook(self._before, with_kwargs=True),
                         model.register_forward_hook(self._after, with_kwargs=True)]

    def _cuda(self) -> bool:
        return self.device.type == "cuda"

    def peaks(self) -> tuple[int | None, int]:
        """(allocator, device) peak bytes since the last reset."""
        if not self._cuda():
            return None, _cpu_peak()
        free, total = torch.cuda.mem_get_info(self.device)
        outside = max(0, total - free - torch.cuda.memory_reserved(self.device))
        return torch.cuda.max_memory_allocated(self.device), torch.cuda.max_memory_reserved(self.device) + outside

    def _before(self, module, args, kwargs) -> None:
        _sync(self.device)
        allocated, device = self.peaks()
        self.between = (max(self.between[0], allocated or 0), max(self.between[1], device))
        if self._cuda():
            torch.cuda.reset_peak_memory_stats(self.device)
        self._start = time.perf_counter()

    def _after(self, module, args, kwargs, output) -> None:
        _sync(self.device)
        seconds = time.perf_counter() - self._start
        ids = args[0] if args else kwargs.get("input_ids")
        allocated, device = self.peaks()
        path = ATTENTION_PATHS.get(getattr(module.config, "_attn_implementation", ""), "absorbed")
        self.records.append(ForwardRecord(int(ids.shape[-1]), path, seconds, allocated, device))
        if self.say is not None:
            peak = "" if allocated is None else f"allocator peak {allocated / 2**30:.2f} GiB, "
            self.say(f"forward {len(self.records)}: {ids.shape[-1]} tokens ({path}) in {seconds:.3f} s, {peak}"
                     f"device peak {device / 2**30:.2f} GiB")
        if self._cuda():
            torch.cuda.reset_peak_memory_stats(self.device)

    def run_peaks(self) -> tuple[int | None, int]:
        """(allocator, device) peak bytes over everything since the meter was attached."""
        allocated, device = self.peaks()
        forwards = [(r.allocated or 0, r.device) for r in self.records]
        top_allocated = max([allocated or 0, self.between[0], *(a for a, _ in forwards)])
        top_device = max([device, self.between[1], *(d for _, d in forwards)])
        return (top_allocated if self._cuda() else None), top_device

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
