"""`union_stats`: valid rows per token and the union-of-2 / union-of-4 ratios of index sets, a captured trace's
(every layer) or synthetic indices' at the headline points, beside the published GLM-5.1 targets, as a `Report`.

Light module (no torch): the CLI checks the options with `check_union_options` before any heavy import.
"""

from __future__ import annotations

import math
from pathlib import Path

from glmcheck.evaluate.arguments import check_count, check_seed
from glmcheck.records.tables import markdown_table

CURVE_LENGTHS = (1024, 2048, 3072, 4096, 6144, 8192)
DEFAULT_MODE, DEFAULT_TOPK = "calibrated", 2048


def synthetic_points() -> list[tuple[int, int]]:
    """(batch, seq_len) of every synthetic point: the five captured targets, then the curve."""
    from glmcheck.data.indices import CAPTURED_TARGETS

    points = [(len(t.seq_lens), t.seq_lens[0]) for t in CAPTURED_TARGETS] + [(1, n) for n in CURVE_LENGTHS]
    return list(dict.fromkeys(points))


def check_union_options(indices: str | None, mode: str | None, topk: int | None, seed: int) -> None:
    """ValueError naming the flag: a trace (`indices`) takes neither `mode` nor `topk`; a top-k past the longest
    synthetic sequence only adds empty slots (and memory)."""
    check_seed(seed)
    if indices is not None:
        given = [option for option, value in (("--topk", topk), ("--mode", mode)) if value is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} {'applies' if len(given) == 1 else 'apply'} to synthetic indices "
                             f"only; --indices {indices} is a captured trace, with its own top-k")
        if Path(indices).is_dir():
            raise ValueError(f"--indices {indices} is a directory; expected an index trace file (.safetensors, "
                             f"from glmcheck capture-indices)")
    check_count(topk, "--topk")
    longest = max(seq_len for _, seq_len in synthetic_points()) if topk is not None else None
    if longest is not None and topk > longest:
        from glmcheck.model.memory import gib

        raise ValueError(f"--topk {topk}: at most {longest}, the longest synthetic sequence (a token selects rows "
                         f"of its causal prefix only, so a larger top-k only adds empty slots; [{longest}, {topk}] "
                         f"int32 indices would take {gib(longest * topk * 4)} for that sequence alone)")


def union_stats(*, indices: str | None = None, mode: str | None = None, topk: int | None = None, seed: int = 0):
    """The statistics of the trace `indices` (every layer), or of synthetic indices of `mode` (default calibrated)
    and `topk` (default 2048) at every synthetic point: a Report whose rows are one per capture and group, whose
    `render()` is the table; its verdict is PASS (a measurement: nothing is judged)."""
    from glmcheck.checks.band import PASS
    from glmcheck.evaluate.report import Report

    check_union_options(indices, mode, topk, seed)
    mode = None if indices else (DEFAULT_MODE if mode is None else mode)
    rows = _trace(indices) if indices else _synthetic(mode, DEFAULT_TOPK if topk is None else topk, seed)
    return Report("union-stats", PASS, rows, {}, {}, {"indices": indices, "mode": mode, "topk": topk, "seed": seed},
                  extra={"indices": indices, "mode": mode, "table": table(rows)})


def _row(source: str, label: str, batch: int, seq_len: int, stats: dict, layer: int | None = None) -> list[dict]:
    return [{"source": source, "capture": label, "batch": batch, "seq_len": seq_len, "layer": layer,
             "valid_rows_per_token": stats["valid_rows_per_token"], "group": g, "union_ratio": ratio}
            for g, ratio in stats["union_ratio"].items()]


def _synthetic(mode: str, topk: int, seed: int) -> list[dict]:
    from glmcheck.bench.kernel import synthetic_indices
    from glmcheck.data.indices import union_statistics

    rows = []
    for batch, seq_len in synthetic_points():
        seq_lens = [seq_len] * batch
        stats = union_statistics(synthetic_indices(mode, seq_lens, topk, seed), (2, 4), seq_lens)
        rows += _row(mode, f"bs{batch} x {seq_len}", batch, seq_len, stats)
    return rows


def _trace(path: str) -> list[dict]:
    from glmcheck.data.indices import union_statistics
    from glmcheck.data.traces import read_trace

    layers, meta = read_trace(path)
    seq_lens = meta.get("seq_lens")
    rows = []
    for layer, indices in layers.items():
        # One KV pool of every sequence's tokens: a slot outside [0, T) is empty (the kernel's contract),
        # not a valid row.
        stats = union_statistics(indices, (2, 4), seq_lens, num_kv_rows=indices.shape[0])
        batch = len(seq_lens) if seq_lens else 1
        rows += _row(Path(path).name, f"layer {layer}", batch, seq_lens[0] if seq_lens else indices.shape[0],
                     stats, layer)
    return rows


def ratio_cell(value: float | None) -> str:
    """A union ratio; `-` where it does not apply (no group of that size, or no valid row to divide by)."""
    return "-" if value is None or math.isnan(value) else f"{value:.2f}x"


def table(rows: list[dict]) -> str:
    """capture | valid rows/token | union of 2 | union of 4 | target, as markdown."""
    import pandas as pd

    from glmcheck.data.indices import CAPTURED_TARGETS

    frame = pd.DataFrame(rows)
    targets = {(len(t.seq_lens), t.seq_lens[0]): (t.valid_rows_per_token, t.union_ratio[2], t.union_ratio[4])
               for t in CAPTURED_TARGETS}
    out = []
    for (label, batch, seq_len), group in frame.groupby(["capture", "batch", "seq_len"], sort=False):
        ratio = dict(zip(group["group"], group["union_ratio"]))
        target = targets.get((batch, seq_len)) if group["layer"].isna().all() else None
        out.append([label, f"{group['valid_rows_per_token'].iloc[0]:.0f}", ratio_cell(ratio.get(2)),
                    ratio_cell(ratio.get(4)),
                    "-" if target is None else f"{target[0]} / {target[1]:.2f}x / {target[2]:.2f}x"])
    return markdown_table(["capture", "valid rows/token", "union of 2", "union of 4",
                           "GLM-5.1 trace (valid / u2 / u4)"], out)
