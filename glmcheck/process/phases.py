"""Where a run's wall time went, by phase (`--profile`, or GLMCHECK_PROFILE=1 for any command).

The process's one `CLOCK` adds up wall seconds per phase as the run goes: `imports` (from `glmcheck.cli.main` to the
first phase: the command's imports of torch, transformers and triton, and its argument checks), `setup` (the
model's config, backends, memory plan), `build` (the model and its weights), `forwards` (every forward under a
backend, device synchronised), `compile` (Triton compiling or loading its kernels from its cache, inside the
forwards; timed through Triton's JIT hooks while profiling), `compile ahead` (the variants compiled in threads
before the forwards, `glmcheck.startup.compile_ahead`: its wall time; those compiles are not in `compile`), `compare`
(the metrics), `diagnose` and `repro` (a FAIL row's diagnosis and `--repro`, less the forwards and metrics they run),
`write` (the record and its tables). `startup` is the interpreter's own, before `glmcheck.cli` ran (Linux: from
/proc/self/stat). `table()` prints them with `other` (the rest) and the total, and under them what the run chose that
moves its time (`note`: the band's and the fp32 reference's forms).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

ENV = "GLMCHECK_PROFILE"
ORDER = ("startup", "imports", "setup", "build", "compile ahead", "forwards", "compile", "compare", "diagnose",
         "repro", "write")


def requested() -> bool:
    """True when GLMCHECK_PROFILE asks for the table (1, true, yes)."""
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes")


class PhaseClock:
    """Wall seconds per phase of one run (module docstring)."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.compiled: Counter = Counter()  # kernel name -> variants compiled or loaded from Triton's cache
        self.rows: dict[str, float] = defaultdict(float)  # backend -> wall seconds of its forwards (compiles in)
        self.notes: dict[str, str] = {}  # what the run chose that moves its time (the kernels' forms), under the table
        self.began: float | None = None
        self.profiling = False
        self._open: list[str] = []  # phases in progress (nested ones add to their own name only)
        self._restore = None  # puts Triton's JIT hooks back (`enable`)

    def begin(self) -> None:
        """The run starts now (`glmcheck.cli.main`); `startup` is read from the process's start time. Not
        profiling until `enable`."""
        self.disable()
        self.seconds.clear()
        self.compiled.clear()
        self.rows.clear()
        self.notes.clear()
        self.began = time.perf_counter()
        startup = _seconds_since_process_start()
        if startup is not None:
            self.seconds["startup"] = startup

    def enable(self) -> None:
        """Print the table at the end, and time Triton's compiles (its JIT hooks; none under its interpreter)."""
        self.profiling = True
        self._restore = _time_triton_compiles(self)

    def disable(self) -> None:
        """Stop profiling; Triton's JIT hooks are given back what they held before `enable`."""
        self.profiling = False
        restore, self._restore = self._restore, None
        if restore is not None:
            restore()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the block's wall time to `name`; the first phase entered closes `imports`."""
        start = time.perf_counter()
        if self.began is not None and "imports" not in self.seconds and not self._open:
            self.seconds["imports"] = start - self.began
        self._open.append(name)
        try:
            yield
        finally:
            self._open.remove(name)
            self.seconds[name] += time.perf_counter() - start

    def in_forwards(self) -> bool:
        """True outside `compile ahead`: a compile now is one a forward waits for."""
        return "compile ahead" not in self._open

    def note(self, name: str, text: str) -> None:
        """A line `name: text` under the table (the last one given for `name`)."""
        self.notes[name] = text

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds

    def add_forward(self, backend: str, seconds: float) -> None:
        """One forward under `backend`: `forwards` and that backend's own total (shown under the table)."""
        self.seconds["forwards"] += seconds
        self.rows[backend] += seconds

    def table(self) -> str:
        """The phases, `other` and the total, in seconds and as shares of the total (startup included)."""
        total = (time.perf_counter() - self.began if self.began is not None else 0.0) + self.seconds.get("startup", 0)
        shown = {name: self.seconds[name] for name in ORDER if name in self.seconds}
        if "compile" in shown and "forwards" in shown:  # compiles happen inside the forwards: shown apart
            shown["forwards"] = max(shown["forwards"] - shown["compile"], 0.0)
        shown["other"] = max(total - sum(shown.values()), 0.0)
        width = max(len(n) for n in shown)
        lines = [f"{'phase':<{width}}  seconds  share"]
        lines += [f"{name:<{width}}  {value:7.2f}  {100 * value / total if total else 0:4.0f} %"
                  for name, value in shown.items()]
        lines.append(f"{'total':<{width}}  {total:7.2f}")
        if self.rows:
            slowest = sorted(self.rows.items(), key=lambda item: -item[1])
            shown_rows = ", ".join(f"{name} {value:.2f}" for name, value in slowest[:8])
            more = len(slowest) - 8
            lines.append(f"forwards by row (s, compiles in): {shown_rows}{f', {more} more' if more > 0 else ''}")
        if self.compiled:
            kinds = ", ".join(f"{name} x{count}" for name, count in self.compiled.most_common(6))
            more = len(self.compiled) - 6
            lines.append(f"compile: {sum(self.compiled.values())} kernel variants ({kinds}"
                         f"{f', {more} more kernels' if more > 0 else ''})")
        lines += [f"{name}: {text}" for name, text in self.notes.items()]
        return "\n".join(lines)


def _seconds_since_process_start() -> float | None:
    """Seconds since this process started (Linux /proc), None elsewhere."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(uptime - int(fields[19]) / ticks, 0.0)
    except (OSError, ValueError, IndexError):
        return None


def _time_triton_compiles(clock: PhaseClock):
    """Triton calls `jit_cache_hook` before it compiles (or loads from its disk cache) a kernel variant and
    `jit_post_compile_hook` after, in the thread that launches: the time between is `compile` for the main thread's
    launches outside `compile ahead` (compiles there overlap; the phase's wall time counts them). Every variant is
    counted. Returns what puts the former hooks back (None when this Triton has no such hooks)."""
    try:
        from triton import knobs
    except ImportError:
        return None
    runtime = getattr(knobs, "runtime", None)
    if runtime is None or not hasattr(runtime, "jit_cache_hook") or not hasattr(runtime, "jit_post_compile_hook"):
        return None
    former = (runtime.jit_cache_hook, runtime.jit_post_compile_hook)
    starts: dict[int, float] = {}  # thread id -> when its compile began
    lock = threading.Lock()

    def before(*args, **kwargs) -> bool:
        starts[threading.get_ident()] = time.perf_counter()
        return False  # a true value would skip the compile

    def after(*args, **kwargs) -> None:
        began = starts.pop(threading.get_ident(), None)
        fn = kwargs.get("fn")
        with lock:
            if began is not None and threading.current_thread() is threading.main_thread() and clock.in_forwards():
                clock.add("compile", time.perf_counter() - began)
            clock.compiled[getattr(fn, "name", "kernel")] += 1

    runtime.jit_cache_hook, runtime.jit_post_compile_hook = before, after

    def restore() -> None:
        runtime.jit_cache_hook, runtime.jit_post_compile_hook = former
    return restore


CLOCK = PhaseClock()
