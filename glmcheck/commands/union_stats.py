"""`glmcheck union-stats`: valid rows per token and union-of-2/4 ratios of index sets."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from glmcheck.arguments import check_count, check_out_dir, check_seed
from glmcheck.bench.names import INDEX_MODES
from glmcheck.records.tables import markdown_table

CURVE_LENGTHS = (1024, 2048, 3072, 4096, 6144, 8192)
DEFAULT_MODE, DEFAULT_TOPK = "calibrated", 2048


def add_parser(sub) -> None:
    p = sub.add_parser("union-stats", help="valid rows/token and union-of-2/4 ratios of index sets",
                       description="Print valid rows per token and the union-of-2 / union-of-4 ratios for a "
                                   "captured trace (--indices FILE, every layer) or for synthetic indices at "
                                   "the five reference points (--synthetic, the default), beside the published "
                                   "GLM-5.1 targets.")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--indices", default=None, help="index trace from glmcheck capture-indices")
    source.add_argument("--synthetic", action="store_true", help="calibrated synthetic indices (default)")
    p.add_argument("--mode", default=None, choices=list(INDEX_MODES),
                   help=f"synthetic index model (default {DEFAULT_MODE}; not with --indices)")
    p.add_argument("--topk", type=int, default=None,
                   help=f"synthetic top-k (default {DEFAULT_TOPK}; not with --indices: a trace has its own)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="record directory (default runs/union-stats-<timestamp>); an "
                                               "existing record or non-empty directory is refused unless --overwrite")
    p.add_argument("--overwrite", action="store_true", help="replace the record in --out")
    p.set_defaults(handler=handle, precheck=precheck)


def _row(source: str, label: str, batch: int, seq_len: int, stats: dict, layer=None) -> list[dict]:
    return [{"source": source, "capture": label, "batch": batch, "seq_len": seq_len, "layer": layer,
             "valid_rows_per_token": stats["valid_rows_per_token"], "group": g, "union_ratio": ratio}
            for g, ratio in stats["union_ratio"].items()]


def synthetic_points() -> list[tuple[int, int]]:
    """(batch, seq_len) of every synthetic point: the five captured targets, then the curve."""
    from glmcheck.data.indices import CAPTURED_TARGETS

    points = [(len(t.seq_lens), t.seq_lens[0]) for t in CAPTURED_TARGETS] + [(1, n) for n in CURVE_LENGTHS]
    return list(dict.fromkeys(points))


def synthetic_lengths() -> list[int]:
    return [seq_len for _, seq_len in synthetic_points()]


def _mode(ns) -> str:
    return DEFAULT_MODE if ns.mode is None else ns.mode


def _topk(ns) -> int:
    return DEFAULT_TOPK if ns.topk is None else ns.topk


def _synthetic(ns) -> list[dict]:
    from glmcheck.bench.kernel import synthetic_indices
    from glmcheck.data.indices import union_statistics

    rows = []
    for batch, seq_len in synthetic_points():
        seq_lens = [seq_len] * batch
        stats = union_statistics(synthetic_indices(_mode(ns), seq_lens, _topk(ns), ns.seed), (2, 4), seq_lens)
        rows += _row(_mode(ns), f"bs{batch} x {seq_len}", batch, seq_len, stats)
    return rows


def _trace(ns) -> list[dict]:
    from glmcheck.data.indices import union_statistics
    from glmcheck.data.traces import read_trace

    layers, meta = read_trace(ns.indices)
    seq_lens = meta.get("seq_lens")
    rows = []
    for layer, indices in layers.items():
        # One KV pool of every sequence's tokens: a slot outside [0, T) is empty (the kernel's contract),
        # not a valid row.
        stats = union_statistics(indices, (2, 4), seq_lens, num_kv_rows=indices.shape[0])
        batch = len(seq_lens) if seq_lens else 1
        rows += _row(Path(ns.indices).name, f"layer {layer}", batch, seq_lens[0] if seq_lens else indices.shape[0],
                     stats, layer)
    return rows


def _ratio(value: float | None) -> str:
    """A union ratio; `-` where it does not apply (no group of that size, or no valid row to divide by)."""
    return "-" if value is None or math.isnan(value) else f"{value:.2f}x"


def table(rows: list[dict]) -> str:
    """capture | valid rows/token | union of 2 | union of 4 (| target) as markdown."""
    import pandas as pd

    from glmcheck.data.indices import CAPTURED_TARGETS

    frame = pd.DataFrame(rows)
    targets = {(len(t.seq_lens), t.seq_lens[0]): (t.valid_rows_per_token, t.union_ratio[2], t.union_ratio[4])
               for t in CAPTURED_TARGETS}
    out = []
    for (label, batch, seq_len), group in frame.groupby(["capture", "batch", "seq_len"], sort=False):
        ratio = dict(zip(group["group"], group["union_ratio"]))
        target = targets.get((batch, seq_len)) if group["layer"].isna().all() else None
        out.append([label, f"{group['valid_rows_per_token'].iloc[0]:.0f}", _ratio(ratio.get(2)), _ratio(ratio.get(4)),
                    "-" if target is None else f"{target[0]} / {target[1]:.2f}x / {target[2]:.2f}x"])
    return markdown_table(["capture", "valid rows/token", "union of 2", "union of 4",
                           "GLM-5.1 trace (valid / u2 / u4)"], out)


def precheck(ns: argparse.Namespace) -> None:
    """The options' checks (`glmcheck.cli` runs it before any heavy import); a trace (--indices) takes
    neither --mode nor --topk."""
    check_seed(ns.seed)
    if ns.indices is not None:
        given = [option for option, value in (("--topk", ns.topk), ("--mode", ns.mode)) if value is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} {'applies' if len(given) == 1 else 'apply'} to synthetic indices "
                             f"only; --indices {ns.indices} is a captured trace, with its own top-k")
        if Path(ns.indices).is_dir():
            raise ValueError(f"--indices {ns.indices} is a directory; expected an index trace file (.safetensors, "
                             f"from glmcheck capture-indices)")
    check_count(ns.topk, "--topk")
    longest = max(synthetic_lengths()) if ns.topk is not None else None  # the default fits every sequence
    if longest is not None and ns.topk > longest:
        from glmcheck.model.plan import gib

        raise ValueError(f"--topk {ns.topk}: at most {longest}, the longest synthetic sequence (a token selects rows "
                         f"of its causal prefix only, so a larger top-k only adds empty slots; [{longest}, {ns.topk}] "
                         f"int32 indices would take {gib(longest * ns.topk * 4)} for that sequence alone)")
    check_out_dir(ns.out, overwrite=ns.overwrite)


def handle(ns: argparse.Namespace) -> int:
    import pandas as pd

    from glmcheck.records.environment import environment_metadata
    from glmcheck.records.layout import clear_record
    from glmcheck.records.store import default_run_dir, write_record

    precheck(ns)
    rows = _trace(ns) if ns.indices else _synthetic(ns)
    text = table(rows)
    print(text)
    directory = Path(ns.out) if ns.out else default_run_dir("union-stats")
    if ns.overwrite:
        clear_record(directory)
    write_record(directory, {"command": "union-stats", "environment": environment_metadata(),
                             "indices": ns.indices, "mode": None if ns.indices else _mode(ns), "rows": rows,
                             "table": text}, pd.DataFrame(rows))
    print(f"record: {directory}")
    return 0
