"""`bench_kernels`: correctness-gated kernel timings at bench points (`glmcheck.bench.kernel`), as a `Report`
whose render is the table `glmcheck bench` prints; `require_gpu` refuses a machine without CUDA.

Light module (no torch at import): the library is imported when the bench runs.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from glmcheck.bench.names import DEFAULT_POINTS

if TYPE_CHECKING:
    from glmcheck.evaluate.report import Report


def require_gpu() -> None:
    """ValueError unless CUDA is available: timings of the CPU interpreter mean nothing."""
    import torch

    if not torch.cuda.is_available():
        raise ValueError("bench needs a CUDA GPU (timings of the CPU interpreter mean nothing)")


def paired_option(text: str | None, specs) -> list[tuple[str, str]]:
    """The --paired pairs "A,B[;C,D...]" of backend names of `specs` (or "best": our fastest exact path at each
    point); ValueError naming --paired and the choices otherwise."""
    from glmcheck.bench.kernel import BEST

    if text is None:
        return []
    known = [spec.name for spec in specs] + [BEST]
    pairs = []
    for item in text.split(";"):
        names = [name.strip() for name in item.split(",")]
        if len(names) != 2 or names[0] == names[1] or any(name not in known for name in names):
            raise ValueError(f"--paired takes two different backends of {', '.join(known)} as A,B (several pairs "
                             f"separated by ';'); got {text!r}")
        pairs.append((names[0], names[1]))
    return pairs


def trace_points(path: str, layer: int | None = None) -> list[tuple]:
    """[(BenchPoint, indices)] of layer `layer` (default: the first) of the index trace at `path`."""
    from glmcheck.bench.kernel import BenchPoint
    from glmcheck.data.traces import read_trace

    layers, meta = read_trace(path)
    layer = layer if layer is not None else next(iter(layers))
    if layer not in layers:
        raise ValueError(f"--trace-layer {layer} is not in the trace (layers {sorted(layers)})")
    seq_lens = meta.get("seq_lens") or [layers[layer].shape[0]]
    return [(BenchPoint(len(seq_lens), seq_lens[0], 8), layers[layer])]


def ceilings_text(points: list) -> str:
    """The GPU's ceilings for this workload (`glmcheck.bench.ceilings`): HBM copy, bf16 matmul, and a table of the
    gather floor per point."""
    from glmcheck.bench.ceilings import copy_tb_per_s, gather_floor, matmul_tflops
    from glmcheck.records.tables import markdown_table

    line = f"HBM copy: {copy_tb_per_s():.2f} TB/s (read + write); bf16 8192^3 matmul: {matmul_tflops():.0f} TFLOP/s"
    rows = []
    for point in dict.fromkeys(point for point, _ in points):
        floor = gather_floor(point)
        rows.append([floor.point, f"{floor.gigabytes:.2f}", f"{floor.ms:.3f}", f"{floor.tb_per_s:.2f}"])
    return line + "\n" + markdown_table(["point", "row bytes read (GB)", "gather-only ms (floor)", "TB/s"], rows)


def bench_kernels(*, points: str = DEFAULT_POINTS, indices: str | None = None, trace_layer: int | None = None,
                  index_mode: str = "calibrated", timing: str = "eager", quick: bool = False, pair_rounds: int = 5,
                  paired: str | None = None, fp64: bool = False, ceilings: bool = False,
                  kv_cache_dtype: str | None = None, quiet: bool = False) -> Report:
    """Every kernel path timed at `points` (BxS:H, comma-separated) or at the `indices` trace's layer
    `trace_layer`, each gated against the fp32 (`fp64`: fp64) reference first; `pair_rounds` alternating rounds of
    each path with topk_length against it without and of the `paired` backends "A,B"; `ceilings` measures the
    GPU's ceilings first. ValueError (one line naming the flag) without CUDA or for a bad option. A measurement:
    verdict PASS; one row per (point, backend); the table printed holds the GPU's ceilings (`ceilings`), where FlashMLA
    and TileLang came from and the timing mode above the timings."""
    import torch
    from tqdm import tqdm

    from glmcheck.backends import flashmla_available
    from glmcheck.backends.forms import active
    from glmcheck.backends.tilelang_sparse import find_tilelang, tilelang_available
    from glmcheck.bench.kernel import default_specs, length_pairs, parse_points, run_point
    from glmcheck.bench.tables import render_accuracy, render_table
    from glmcheck.checks.band import PASS
    from glmcheck.evaluate.report import Report

    require_gpu()
    if pair_rounds < 0:
        raise ValueError(f"--pair-rounds must be >= 0, got {pair_rounds}")
    chosen = trace_points(indices, trace_layer) if indices else [(point, None) for point in parse_points(points)]
    have_flash, source = flashmla_available()
    have_tilelang, tilelang_source = tilelang_available()
    specs = default_specs(have_flash, kv_cache_dtype, tilelang=have_tilelang)
    pairs = length_pairs(specs) + paired_option(paired, specs)
    preface = [ceilings_text(chosen)] if ceilings else []
    reference = "fp64" if fp64 else "fp32"
    results = []
    for point, point_indices in tqdm(chosen, desc="bench points", disable=quiet, leave=False):
        results += run_point(point, specs, quick=quick, mode=index_mode, indices=point_indices, timing=timing,
                             pairs=pairs, pair_rounds=pair_rounds,
                             reference_dtype=torch.float64 if fp64 else torch.float32, kv_cache_dtype=kv_cache_dtype)
    table = "\n\n".join(part for part in (render_table(results), render_accuracy(results, reference)) if part)
    if have_tilelang and find_tilelang().first_call_s:
        table += "\n\nTileLang's first call per head count (its JIT compile or disk-cache load included): " + ", ".join(
            f"H={h} {s:.1f} s" for h, s in sorted(find_tilelang().first_call_s.items()))
    preface += [f"FlashMLA: {source}" if have_flash else f"FlashMLA absent ({source})",
                f"TileLang: {tilelang_source}" if have_tilelang else f"TileLang absent ({tilelang_source})",
                f"timing: {timing}" + (" (CUDA-graph replay: GPU time without host launch cost)" if timing == "graph"
                                       else " (the Python call, host launch cost included)")]
    rows = [dataclasses.asdict(r) | {"point": r.point.label} for r in results]
    options = {"index_mode": index_mode, "timing": timing, "points": points, "pair_rounds": pair_rounds,
               "paired": paired, "reference": reference, "kv_cache_dtype": kv_cache_dtype, "indices": indices}
    return Report("bench", PASS, rows, {}, {}, {**options, "quick": quick, **active().record("cuda")},
                  extra={**options, "table": "\n".join([*preface, table])})
