"""Kernel benchmark: correctness-gated timings of the sparse-MLA prefill backends on the GPU.

Each point (batch x length, heads) builds fresh N(0, 1) bf16 q/kv and prefill indices: by
default calibrated synthetic ones (`glmcheck.indices.calibrated_indices`: token t < topk selects
its causal prefix, later tokens a drifting top-k set whose union-of-2/4 ratios match captured
GLM-5.1 traces; batches are independent sequences in one KV pool), or a random walk of another
generator, "drift10" / "drift2" (10 % / 2 % of the rows swapped per token), "uniform", or a
captured trace. Union paths are also timed with a plan built
before the timed calls ("+plan": a shared layer's call). With an FP8 KV cache (`kv_cache_dtype` "fp8_e4m3") the
rows are DSA's FP8 pool (`glmcheck.kernels.fp8`): our paths read its dequantised rows as they are ("+len") and with
the dequantisation in the timed call ("+len+deq": the one-launch `glmcheck.kernels.fp8_dequant`, the torch form's
bits), and FlashMLA's FP8 decode kernel reads the pool itself ("flashmla_kv", the engines' pick over an FP8 cache),
all gated against the reference on the pool's values. Peers: FlashMLA and SGLang's TileLang prefill where they load;
a shape a peer does not take is a refused cell. Every backend's output is first compared with
the fp32 reference (rel-L2 gate); only a backend that passes is timed
(`triton.testing.do_bench`, median ms); a failed gate gives a message, never a number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.bench.names import DEFAULT_POINTS, HEADLINE_POINTS, INDEX_MODES, TIMINGS  # noqa: F401
from glmcheck.checks import metrics
from glmcheck.data.indices import calibrated_indices, drifting_indices, uniform_indices
from glmcheck.data.inputs import poisoned_out, random_qkv
from glmcheck.kernels import plan_sparse_mla, sparse_mla_prefill, union_dedup, union_is_legal
from glmcheck.kernels.fp8 import dequantize_kv_pool, quantize_kv_pool
from glmcheck.kernels.fp8_dequant import dequantize_kv_pool_fused
from glmcheck.kernels.prefill import effective_lengths, kernel_route
from glmcheck.kernels.union import token_row_sets

GATE_REL_L2 = 3e-3
REFERENCE_BUDGET_BYTES = 2 * 2**30  # the reference's gather chunk on the GPU (fewer, larger chunks)
D_V, D_TAIL, TOPK = 512, 64, 2048


@dataclass(frozen=True)
class BenchPoint:
    """batch sequences of seq_len tokens each, `heads` query heads per token."""

    batch: int
    seq_len: int
    heads: int

    @property
    def label(self) -> str:
        return f"{self.batch}x{self.seq_len} H={self.heads}"


def parse_points(text: str) -> list[BenchPoint]:
    """Points from "BxS:H,BxS:H,...", e.g. "1x8192:64"; ValueError naming --points otherwise."""
    points = []
    for item in (part.strip() for part in text.split(",")):
        try:
            shape, heads = item.split(":")
            batch, seq_len = shape.lower().split("x")
            point = BenchPoint(int(batch), int(seq_len), int(heads))
        except ValueError:
            raise ValueError(f"--points takes BxS:H items separated by commas (e.g. 1x8192:64), got {item!r}") \
                from None
        if min(point.batch, point.seq_len) < 1 or not 1 <= point.heads <= 128:
            raise ValueError(f"--points: batch and length must be >= 1 and heads in 1..128, got {item!r}")
        points.append(point)
    return points


@dataclass
class PointInputs:
    """A point's inputs; `pool` the FP8 pool `kv`'s rows are the values of (an FP8 KV cache), else None."""

    q: torch.Tensor
    kv: torch.Tensor
    indices: torch.Tensor
    topk_length: torch.Tensor
    sm_scale: float
    pool: torch.Tensor | None = None


@dataclass
class BenchResult:
    """One backend at one point: ms is None when the gate failed or the backend is absent. A paired
    row (`ratios` not empty) holds the per-round ratios of backend "A / B", timed alternately."""

    point: BenchPoint
    backend: str
    ms: float | None
    rel_l2: float | None
    note: str = ""
    ratios: tuple[float, ...] = ()


@dataclass
class BenchSpec:
    """A timed callable: `run(inputs, out)` returns the [T, H, d_v] output; backends that
    write in place use `out` (poisoned with NaN for the gate run), others return a new tensor."""

    name: str
    run: Callable[[PointInputs, torch.Tensor], torch.Tensor]
    gate_rel_l2: float = GATE_REL_L2
    applies: Callable[[int], bool] = lambda heads: True  # runs at points with this many heads
    refuses: Callable[[PointInputs], str | None] | None = None  # why a peer does not take a point: a "refused" cell
    catch: tuple[type[Exception], ...] = ()  # a peer's errors that end its cell ("failed: ..."), not the bench


def synthetic_indices(mode: str, seq_lens: list[int], topk: int, seed: int) -> torch.Tensor:
    """Prefill indices [sum(seq_lens), topk] int32 (CPU) of one of INDEX_MODES."""
    if mode == "calibrated":
        return calibrated_indices(seq_lens, topk, seed=seed)
    if mode in ("drift10", "drift2"):  # a random walk: 10 % or 2 % of the rows swapped per token
        return drifting_indices(seq_lens, topk, int(mode[5:]) / 100, seed=seed)
    if mode == "uniform":
        return uniform_indices(seq_lens, topk, seed=seed)
    raise ValueError(f"index mode must be one of {', '.join(INDEX_MODES)}, got {mode!r}")


def make_inputs(point: BenchPoint, topk: int | None = None, seed: int = 0, device: str = "cuda",
                mode: str = "calibrated", indices: torch.Tensor | None = None,
                kv_cache_dtype: str | None = None) -> PointInputs:
    """Fresh random q/kv and prefill indices for `point` on `device` (topk default TOPK).

    `indices` (e.g. from a captured trace) replaces the synthetic ones; the KV pool then has
    as many rows as the indices have tokens. `kv_cache_dtype` "fp8_e4m3" writes the rows to the FP8 pool and
    gives its values as `kv` (and the pool as `pool`).
    """
    tokens = point.batch * point.seq_len
    topk = TOPK if topk is None else topk
    if indices is None:
        indices = synthetic_indices(mode, [point.seq_len] * point.batch, topk, seed)
    elif indices.shape[0] != tokens:
        raise ValueError(f"indices must have {tokens} rows for {point.label}, got {indices.shape[0]}")
    indices = indices.to(device)
    q, kv = random_qkv(tokens, point.heads, tokens, D_V, D_TAIL, torch.Generator().manual_seed(seed), device)
    lengths = effective_lengths(indices, None, tokens)
    pool = None
    if kv_cache_dtype not in (None, "bf16", "fp8_e4m3"):
        raise ValueError(f"--kv-cache-dtype must be bf16 or fp8_e4m3, got {kv_cache_dtype!r}")
    if kv_cache_dtype == "fp8_e4m3":
        pool = quantize_kv_pool(kv, d_rope=D_TAIL)
        kv = dequantize_kv_pool(pool, tokens, d_rope=D_TAIL)
    return PointInputs(q, kv, indices, lengths, (D_V + D_TAIL) ** -0.5, pool)


EXACT_PATHS = ("per-token", "union2", "union4", "union8")  # our kernel's paths; each also as "+len"
LENGTH_SUFFIX = "+len"
TILELANG = "tilelang"  # SGLang's TileLang prefill, a peer
BEST = "best"  # in a pair: the fastest of our exact paths at that point, build included (`is_exact_path`)


def is_exact_path(name: str) -> bool:
    """One of our paths as a user calls it, with or without topk_length (its build included; not "+plan")."""
    return name.removesuffix(LENGTH_SUFFIX) in EXACT_PATHS


def default_specs(flashmla: bool, kv_cache_dtype: str | None = None, tilelang: bool = False) -> list[BenchSpec]:
    """The backends of the reference table (FlashMLA, and SGLang's TileLang prefill, only when they load): each of
    our paths with and without topk_length (a union path only where G*H is legal: elsewhere it would run
    per-token); over an FP8 KV cache also `fp8_specs`."""
    from glmcheck.backends.flashmla import flashmla_sparse_prefill
    from glmcheck.backends.torch_gather import torch_bf16_sparse_prefill

    def triton(union: int, with_length: bool):
        return lambda x, out: sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, out=out, union=union,
                                                 topk_length=x.topk_length if with_length else None)

    specs = []
    for name, union in zip(EXACT_PATHS, (0, 2, 4, 8), strict=True):
        legal = (lambda heads: True) if not union else (lambda heads, g=union: union_is_legal(heads, g))
        specs += [BenchSpec(name, triton(union, False), applies=legal),
                  BenchSpec(name + LENGTH_SUFFIX, triton(union, True), applies=legal)]
        if union:
            specs.append(BenchSpec(name + LENGTH_SUFFIX + PLAN_SUFFIX, _with_ready_plan(union), applies=legal))
    if flashmla:
        specs += [
            BenchSpec("flashmla+len", lambda x, out: flashmla_sparse_prefill(
                x.q, x.kv, x.indices, x.sm_scale, D_V, topk_length=x.topk_length)),
            BenchSpec("flashmla", lambda x, out: flashmla_sparse_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V)),
        ]
    if tilelang:
        specs.append(tilelang_spec())
    # Its scores are rounded to bf16 by the bmm, so it gets a looser gate (about 3e-3 measured).
    specs.append(BenchSpec("torch_bf16", lambda x, out: torch_bf16_sparse_prefill(
        x.q, x.kv, x.indices, x.sm_scale, D_V), gate_rel_l2=1e-2, applies=lambda heads: heads == 8))
    if kv_cache_dtype == "fp8_e4m3":
        specs += fp8_specs(flashmla)
    return specs


def tilelang_spec() -> BenchSpec:
    """SGLang's TileLang prefill (`glmcheck.backends.tilelang_sparse`) as SGLang calls it: no topk_length, heads
    unpadded; a shape its kernel does not take is a "refused" cell, an error in its compile or run a "failed" one."""
    from glmcheck.backends.tilelang_sparse import tilelang_refusal, tilelang_sparse_prefill

    return BenchSpec(TILELANG, lambda x, out: tilelang_sparse_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V),
                     refuses=lambda x: tilelang_refusal(x.q.shape[1], x.q.shape[2], D_V, x.indices.shape[-1]),
                     catch=(Exception,))


DEQUANT_SUFFIX = "+deq"  # the pool's dequantisation inside the timed call


def fp8_specs(flashmla: bool) -> list[BenchSpec]:
    """Over an FP8 KV cache: each of our paths with topk_length and the pool's dequantisation in the call (one
    launch, `dequantize_kv_pool_fused`: the same rows as `make_inputs` gives, bit for bit); FlashMLA's FP8 decode
    kernel on the pool (`glmcheck.backends.flashmla_kv`) when FlashMLA loads."""
    from glmcheck.backends.flashmla_kv import flashmla_kv_on_pool

    def dequantised(union: int):
        def run(x, out):
            rows = dequantize_kv_pool_fused(x.pool, x.kv.shape[0], d_rope=D_TAIL)
            return sparse_mla_prefill(x.q, rows, x.indices, x.sm_scale, D_V, out=out, union=union,
                                      topk_length=x.topk_length)
        return run

    specs = []
    for name, union in zip(EXACT_PATHS, (0, 2, 4, 8), strict=True):
        legal = (lambda heads: True) if not union else (lambda heads, g=union: union_is_legal(heads, g))
        specs.append(BenchSpec(name + LENGTH_SUFFIX + DEQUANT_SUFFIX, dequantised(union), applies=legal))
    if flashmla:
        specs.append(BenchSpec("flashmla_kv", lambda x, out: flashmla_kv_on_pool(
            x.q, x.pool, x.indices, x.sm_scale, D_V, num_rows=x.kv.shape[0], topk_length=x.topk_length)))
    return specs


PLAN_SUFFIX = "+plan"  # the attention alone, with a plan built before the timed calls (a shared layer's call)


def _with_ready_plan(union: int) -> Callable[[PointInputs, torch.Tensor], torch.Tensor]:
    """run(inputs, out) for the union path with topk_length and a plan built once per inputs, outside the
    timed calls (the plan is held with the inputs it was built from)."""
    held: list = []

    def run(x: PointInputs, out: torch.Tensor) -> torch.Tensor:
        if not held or held[0] is not x:
            held[:] = [x, plan_sparse_mla(x.indices, num_kv_rows=x.kv.shape[0], num_heads=x.q.shape[1],
                                          topk_length=x.topk_length, union=union)]
        return sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V, out=out, topk_length=x.topk_length,
                                  plan=held[1])

    return run


def length_pairs(specs: list[BenchSpec]) -> list[tuple[str, str]]:
    """(path+len, path) for every path of ours in `specs` given in both forms."""
    names = {spec.name for spec in specs}
    return [(name + LENGTH_SUFFIX, name) for name in EXACT_PATHS if {name, name + LENGTH_SUFFIX} <= names]


def paired_ratios(call_a: Callable[[], object], call_b: Callable[[], object], rounds: int,
                  timer: Callable[..., float], rep_ms: int) -> tuple[float, ...]:
    """ms(A) / ms(B) per round over `rounds` rounds, the order alternating (A B, B A, ...) so that
    neither side always runs first."""
    ratios = []
    for round_ in range(rounds):
        if round_ % 2:
            t_b, t_a = timer(call_b, rep_ms=rep_ms), timer(call_a, rep_ms=rep_ms)
        else:
            t_a, t_b = timer(call_a, rep_ms=rep_ms), timer(call_b, rep_ms=rep_ms)
        ratios.append(t_a / t_b)
    return tuple(ratios)


def time_ms(fn: Callable[[], object], warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median milliseconds of fn() on the GPU (triton.testing.do_bench)."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def capture_graph(fn: Callable[[], torch.Tensor]) -> tuple[Callable[[], object], torch.Tensor]:
    """Capture fn() in a CUDA graph (after one warm call on a side stream, so compilation and
    allocator setup stay outside); returns (graph.replay, the output tensor the replays write)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = fn()
    return graph.replay, output


def _timed_call(spec: BenchSpec, inputs: PointInputs, out: torch.Tensor, reference: torch.Tensor,
                timing: str, capture: Callable) -> tuple[Callable[[], object] | None, str]:
    """The call to time for a spec that passed its eager gate, or (None, why) when its graph
    replay cannot be captured or fails the same gate (the replay's output is poisoned first)."""
    def run():
        return spec.run(inputs, out)

    if timing == "eager":
        return run, ""
    replay, output, failure = _try_capture(capture, run)
    if replay is None:
        return None, failure
    output.fill_(float("nan"))
    replay()
    rel = metrics.rel_l2(output, reference)
    if not rel <= spec.gate_rel_l2:
        return None, f"graph replay gate failed: rel-L2 {rel:.3e}"
    # A graph holds no reference to the tensors it writes: keep `out` and the output alive for as long
    # as the replay is timed, or the replays write into memory the allocator has handed out again.
    return (lambda _written=(out, output): replay()), "CUDA graph replay"


def gated_call(spec: BenchSpec, inputs: PointInputs, reference: torch.Tensor, timing: str,
               capture: Callable = capture_graph) -> tuple[Callable[[], object] | None, float, str]:
    """(the call to time, rel-L2 of its eager run, note) for one spec: it runs once on a
    NaN-poisoned [T, H, d_v] output and must reach `spec.gate_rel_l2` against `reference`, then
    `_timed_call` adds the graph replay's own gate. The call is None when a gate fails (the note
    says which; a NaN fails too)."""
    out = spec.run(inputs, poisoned_out(inputs.q.shape[0], inputs.q.shape[1], D_V, inputs.q.device))
    rel = metrics.rel_l2(out, reference)
    if not rel <= spec.gate_rel_l2:
        return None, rel, f"gate failed: rel-L2 {rel:.3e}"
    call, note = _timed_call(spec, inputs, out, reference, timing, capture)
    return call, rel, note


def _try_capture(capture: Callable, fn: Callable[[], torch.Tensor]):
    """(replay, output, "") from capture(fn), or (None, None, why) when capturing fails (e.g. a
    backend that syncs with the host)."""
    try:
        replay, output = capture(fn)
    except RuntimeError as err:
        return None, None, f"graph capture failed: {err}"
    return replay, output, ""


def run_point(point: BenchPoint, specs: list[BenchSpec], seed: int = 0, quick: bool = False,
              topk: int | None = None, device: str = "cuda", mode: str = "calibrated",
              indices: torch.Tensor | None = None, timer: Callable[..., float] | None = None,
              timing: str = "eager", capture: Callable = capture_graph, pairs: list[tuple[str, str]] = (),
              pair_rounds: int = 0, reference_dtype: torch.dtype = torch.float32,
              kv_cache_dtype: str | None = None) -> list[BenchResult]:
    """Gate then time every spec that applies at the point's head count (rel-L2 against the
    reference in `reference_dtype`: fp32, or fp64 where margins are finer than fp32's own
    rounding, ~1e-10 of a ~2e-3 rel-L2); the union builds are timed
    alone as well, and so is the per-token path's row compaction where that path runs the ping-pong tile
    (docs/performance.md, "Per-token compaction"); then each (A, B) of `pairs` that both passed their gates is timed
    alternately over `pair_rounds` rounds (`paired_ratios`), one paired row per pair (A or B `BEST`: the fastest exact
    path there). A spec's `refuses` gives a "refused: ..." row, an exception of its `catch` a "failed: ..." row.

    `timing` "eager" times the Python call as a user makes it (host launch cost included: a small
    point whose host work outlasts its GPU work measures the host); "graph" captures each call
    in a CUDA graph and times its replay (the GPU's time alone; every backend alike), after the
    replay's output passed the same gate. `timer(fn, rep_ms=...)` defaults to `time_ms` (GPU) and
    `capture(fn) -> (replay, output)` to `capture_graph`; tests pass their own. `kv_cache_dtype` "fp8_e4m3": the
    point's rows are an FP8 pool's values (`make_inputs`), the reference reads them.
    """
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {TIMINGS}, got {timing!r}")
    timer = timer or time_ms
    inputs = make_inputs(point, topk=topk, seed=seed, device=device, mode=mode, indices=indices,
                         kv_cache_dtype=kv_cache_dtype)
    reference = sparse_mla_reference(inputs.q, inputs.kv, inputs.indices, inputs.sm_scale, D_V,
                                      dtype=reference_dtype, budget_bytes=REFERENCE_BUDGET_BYTES)
    results = []
    rep = 40 if quick else 100
    calls = {}
    for spec in (s for s in specs if s.applies(point.heads)):
        refusal = spec.refuses(inputs) if spec.refuses else None
        if refusal:
            results.append(BenchResult(point, spec.name, None, None, f"refused: {refusal}"))
            continue
        try:
            call, rel, note = gated_call(spec, inputs, reference, timing, capture)
        except spec.catch as err:
            results.append(BenchResult(point, spec.name, None, None, f"failed: {type(err).__name__}: {err}"[:300]))
            continue
        results.append(BenchResult(point, spec.name, None if call is None else timer(call, rep_ms=rep), rel, note))
        if call is not None:
            calls[spec.name] = call
    index_work = {f"build{g}": (lambda g=g: union_dedup(inputs.indices, g, num_kv_rows=inputs.kv.shape[0]).rows,
                                "union build alone") for g in (2, 4, 8)}
    route = kernel_route(inputs.q, inputs.kv, inputs.indices, inputs.sm_scale, D_V, topk_length=inputs.topk_length)
    if route.tile == "gluon-pingpong":  # the per-token path compacts each token's rows before the tile
        index_work["compaction"] = (lambda: token_row_sets(inputs.indices, inputs.topk_length, inputs.kv.shape[0]).rows,
                                    "per-token row compaction alone (with topk_length)")
    for name, (work, what) in index_work.items():
        call, _, failure = (work, None, "") if timing == "eager" else _try_capture(capture, work)
        results.append(BenchResult(point, name, None if call is None else timer(call, rep_ms=rep), None,
                                   failure or what))
    ours = [r for r in results if r.ms is not None and is_exact_path(r.backend)]
    best = min(ours, key=lambda r: r.ms).backend if ours else None
    for a, b in pairs:
        a_name, b_name = (best if name == BEST else name for name in (a, b))
        if pair_rounds and a_name in calls and b_name in calls:
            ratios = paired_ratios(calls[a_name], calls[b_name], pair_rounds, timer, rep_ms=rep // 2)
            note = f"{pair_rounds} paired rounds" + (f"; {BEST} = {best}" if BEST in (a, b) else "")
            results.append(BenchResult(point, f"{a} / {b}", None, None, note, ratios))
    return results
