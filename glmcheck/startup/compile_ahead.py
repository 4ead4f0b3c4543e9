"""Compile the Triton kernels a check will need before its forwards, in parallel threads.

A check runs its backends one forward after another, and Triton compiles a kernel variant the first time a launch
needs it, so a cold run pays each backend's compiles in turn (layer0 on glm-5.2: 10 variants, 16-18 s of a 36-39 s
run; docs/performance.md, "Compile ahead"). Triton's compile spends most of its time outside the GIL (MLIR passes,
LLVM, ptxas), so variants compiled in threads overlap.

After the exact reference's forward (run with `record_calls`), `compile_ahead` runs each backend that compiles
Triton kernels once on every recorded call (the very tensors the reference's attention was given: the same shapes,
strides and integer arguments, hence the same variants), a thread per backend. The outputs are discarded; the
forwards that follow find their variants compiled. A backend that raises here is left alone: its own forward
raises it where the check reports it.

A cold run's command line may have started a child compiling the variants its options predict
(`glmcheck.startup.precompile`): compile ahead first waits for it, then finds them cached.

Which backends: glmcheck's own Triton ones (the kernel under test's paths, the band's variants), not plug-ins (their
thread safety is not ours to assume) and not the exact reference. Where: a CUDA device without Triton's interpreter.
`GLMCHECK_COMPILE_AHEAD=0` turns it off (for measurements); `1` forces it on any device (tests: the interpreter then
runs in one thread).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import torch

from glmcheck.backends.names import is_band_name
from glmcheck.backends.registry import backend_source, get_backend
from glmcheck.backends.validation import HF_NAMES
from glmcheck.kernels.runtime import interpreter_active
from glmcheck.model.kernel_call import KernelCall
from glmcheck.process.phases import CLOCK
from glmcheck.startup import child

ENV = "GLMCHECK_COMPILE_AHEAD"
MAX_THREADS = 16
KEPT_BYTES = 1 << 30  # the recorded calls of several forwards kept at once (`CallSet`): 1 GiB of their tensors


def enabled(device: torch.device | str) -> bool:
    """True when the check on `device` should compile ahead (module docstring)."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice in ("0", "false", "no", "off"):
        return False
    if choice in ("1", "true", "yes", "on"):
        return True
    return torch.device(device).type == "cuda" and not interpreter_active()


def compiling(names: Iterable[str]) -> list[str]:
    """Of `names`, glmcheck's own backends that compile Triton kernels, each once, in order."""
    own = (n for n in dict.fromkeys(names) if n not in HF_NAMES)
    return [n for n in own if (n.startswith("triton_sparse_mla") or is_band_name(n))
            and backend_source(n) == "built in"]


def run_each(name: str, calls: list[KernelCall], *, deterministic: bool = False,
             kv_cache_dtype: str | None = None) -> None:
    """Backend `name` once on each of `calls` (its plan built first when it has a planner), on the calls' device;
    outputs discarded, exceptions left to the backend's own forward."""
    backend = get_backend(name, deterministic=deterministic, kv_cache_dtype=kv_cache_dtype)
    device = calls[0].q.device
    try:
        with torch.inference_mode(), (torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()):
            for call in calls:
                plan = backend.plan(call.indices, call.kv.shape[0], call.q.shape[1], call.lengths)
                backend(call.q, call.kv, call.indices, call.sm_scale, call.d_v, topk_length=call.lengths, plan=plan)
    except Exception:  # noqa: BLE001 - the backend's own forward reports it (module docstring)
        return


def compile_ahead(calls: list[KernelCall], names: Iterable[str], *, deterministic: bool = False,
                  kv_cache_dtype: str | None = None, threads: int | None = None) -> list[str]:
    """Run each of `compiling(names)` on `calls` (`run_each`), a thread per backend (at most `threads`, default
    min(backends, CPU count, 16); one under Triton's interpreter), and wait for all; the device is synchronised.
    Returns the backends run. The wall time is the `--profile` table's `compile ahead` phase. Memory: the threads
    hold one call's workspace and output per backend at once; a backend that runs out of it is left to its forward
    (`run_each`), and the allocator's cache is emptied after."""
    todo = compiling(names)
    if not calls or not todo:
        return []
    if threads is None:
        threads = 1 if interpreter_active() else min(len(todo), os.cpu_count() or 1, MAX_THREADS)
    if threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    with CLOCK.phase("compile ahead"):
        child.wait()  # the command line's child compiled the predicted variants: they are then cached
        if threads == 1:
            for name in todo:
                run_each(name, calls, deterministic=deterministic, kv_cache_dtype=kv_cache_dtype)
        else:
            with ThreadPoolExecutor(threads, thread_name_prefix="glmcheck-compile") as pool:
                list(pool.map(lambda name: run_each(name, calls, deterministic=deterministic,
                                                    kv_cache_dtype=kv_cache_dtype), todo))
        device = calls[0].q.device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()  # the threads' blocks cached at once: give them back before the forwards
    return todo


class CallSet:
    """The recorded calls of several forwards (firsttoken's prompts), one per distinct `KernelCall.key`, their tensors
    kept alive up to `budget` bytes; a shape past the budget compiles in its forward, as without compile ahead."""

    def __init__(self, budget: int = KEPT_BYTES):
        self.budget, self.used, self.by_key = budget, 0, {}

    def add(self, calls: Iterable[KernelCall]) -> None:
        for call in calls:
            size = sum(t.numel() * t.element_size() for t in (call.q, call.kv, call.indices, call.lengths)
                       if t is not None)
            if call.key() not in self.by_key and self.used + size <= self.budget:
                self.by_key[call.key()] = call
                self.used += size

    def calls(self) -> list[KernelCall]:
        return list(self.by_key.values())


def after(run, names: Iterable[str], options) -> list[str]:
    """`compile_ahead` over a forward's recorded calls (`BackendRun.kernel_calls`; none unless it ran with
    `record_calls`), with the check's `SwapOptions` (determinism, KV-cache dtype)."""
    return compile_ahead(run.kernel_calls, names, deterministic=options.deterministic,
                         kv_cache_dtype=options.kv_cache_dtype)
