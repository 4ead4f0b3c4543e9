"""How a check calls its backends: one-shot prefill (`--calls prefill`, the default) or as an engine's extend does
(`--calls serving`): the prompt in chunks of `--chunk` tokens, its KV rows at shuffled 64-row pages of a pool of
`--pool-rows` rows, `topk_length` given with stale slot ids past it, `--requests` requests packed into each call
(docs/checks.md, "Engine-shaped calls"; the calls themselves: `glmcheck.model.engine_pool`).

Light module (no torch): the CLI checks these options before any heavy import.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from glmcheck.process.wording import flag

CALLS = ("prefill", "serving")
PAGE = 64  # KV rows a page of the pool (SGLang's and vLLM's DSA page size)
CPU_CHUNK = 48  # tokens a chunk on the CPU: the default 128-token prompt in 3 chunks, boundaries inside pages
GPU_CHUNK = 2048  # ... on a GPU: 4096 tokens in 2 chunks, 8192 in 4
CPU_POOL_ROWS = 4096  # 2**18+ elements at ref-cpu's d_qk of 80 (640 KB of bf16): past small-scale int32 wraps
GPU_POOL_ELEMENTS = 2**31  # on a GPU the default pool crosses it (S x d_qk): int64 row offsets are exercised
GPU_POOL_ROWS = 2**22  # ... and holds at least this many rows (4.8 GB of bf16 at d_qk 576)
DEFAULT_REQUESTS = 2  # the prompt and one other request in each call
MAX_REQUESTS = 64
MAX_POOL_ROWS = 2**31 - PAGE  # slots are int32 indices


@dataclass(frozen=True)
class EngineShape:
    """The engine-shaped calls asked for: `chunk` tokens a call, a pool of `pool_rows` rows (a multiple of PAGE),
    `requests` requests packed a call; None takes the device's default (`resolved`). `seed` seeds the layout (which
    pages, the other requests, the stale slots): every backend of a check sees the same one. `compare` calls each
    backend one-shot as well, to say whether its outputs equal its one-shot outputs bit for bit; None: every backend
    but those that may run in Triton's CPU interpreter, where the second call would double the check's time
    (`glmcheck.model.engine_calls.EngineCalls.compares`)."""

    chunk: int | None = None
    pool_rows: int | None = None
    requests: int | None = None
    seed: int = 0
    compare: bool | None = None

    def resolved(self, device_type: str, d_qk: int, needed_rows: int) -> EngineShape:
        """The shape with every default filled for a pool on `device_type` of rows of `d_qk` values that must hold
        `needed_rows` rows (the prompt's pages and the other requests'): chunk CPU_CHUNK / GPU_CHUNK; pool
        CPU_POOL_ROWS on the CPU, on a GPU the first page-multiple past GPU_POOL_ELEMENTS elements (at least
        GPU_POOL_ROWS), either grown to twice `needed_rows` when that is more. ValueError naming --pool-rows when a
        given pool cannot hold `needed_rows`."""
        gpu = device_type == "cuda"
        chunk = self.chunk or (GPU_CHUNK if gpu else CPU_CHUNK)
        requests = self.requests or DEFAULT_REQUESTS
        if self.pool_rows is not None:
            check_pool_rows(self.pool_rows, needed_rows)
            return EngineShape(chunk, self.pool_rows, requests, self.seed, self.compare)
        crossing = (GPU_POOL_ELEMENTS // d_qk // PAGE + 1) * PAGE
        base = max(GPU_POOL_ROWS, crossing) if gpu else CPU_POOL_ROWS
        pool = max(base, math.ceil(2 * needed_rows / PAGE) * PAGE)
        return EngineShape(chunk, min(pool, MAX_POOL_ROWS), requests, self.seed, self.compare)

    def describe(self) -> dict:
        """What the record says was asked (None: the device's default; the shapes that ran are in the facts)."""
        return {"calls": "serving", **{k: v for k, v in asdict(self).items() if k != "seed"}}


def check_pool_rows(pool_rows: int | None, needed_rows: int) -> None:
    """ValueError naming --pool-rows when a given pool cannot hold `needed_rows` (None: the default grows to fit)."""
    if pool_rows is not None and pool_rows < needed_rows:
        raise ValueError(f"{flag('pool_rows')} {pool_rows}: the prompt's pages and the other requests' need at least "
                         f"{needed_rows} rows")


def check_engine_options(calls: str, chunk: int | None, pool_rows: int | None, requests: int | None) -> None:
    """ValueError naming the argument (its flag under the CLI: `glmcheck.process.wording`): `calls` one of CALLS;
    `chunk`, `pool_rows`, `requests` positive ints (a pool a multiple of PAGE rows, at most MAX_POOL_ROWS; at most
    MAX_REQUESTS requests), and given only with calls "serving"."""
    if calls not in CALLS:
        raise ValueError(f"{flag('calls')} must be one of {', '.join(CALLS)}, got {calls!r}")
    given = {flag("chunk"): chunk, flag("pool_rows"): pool_rows, flag("requests"): requests}
    for name, value in given.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if calls == "prefill" and any(v is not None for v in given.values()):
        named = ", ".join(name for name, value in given.items() if value is not None)
        raise ValueError(f"{named} shape the engine's calls: give them with {flag('calls')} serving")
    if pool_rows is not None and (pool_rows % PAGE or pool_rows > MAX_POOL_ROWS):
        raise ValueError(f"{flag('pool_rows')} must be a multiple of {PAGE} (rows a page) up to {MAX_POOL_ROWS}, "
                         f"got {pool_rows}")
    if requests is not None and requests > MAX_REQUESTS:
        raise ValueError(f"{flag('requests')} must be at most {MAX_REQUESTS}, got {requests}")


def engine_shape(calls: str, chunk: int | None, pool_rows: int | None, requests: int | None,
                 seed: int = 0) -> EngineShape | None:
    """The shape of `--calls serving` (checked: `check_engine_options`), None for one-shot prefill."""
    check_engine_options(calls, chunk, pool_rows, requests)
    return EngineShape(chunk, pool_rows, requests, seed) if calls == "serving" else None
