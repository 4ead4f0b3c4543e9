"""`glmcheck bench`: correctness-gated kernel timings (or, with --model, whole-prefill latency)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from glmcheck.arguments import check_experts, check_layers, check_out_dir
from glmcheck.bench.names import DEFAULT_POINTS, INDEX_MODES, TIMINGS
from glmcheck.records.tables import markdown_table


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="kernel timings on the GPU, each point correctness-gated first",
                       description="Kernel benchmark, topk 2048, at the five reference points (1x2048, 1x4096, "
                                   "1x8192, 2x4096, 4x2048; H=8), 1x8192 at H=16, 32, 64, 96, 128 and 1x2048 at "
                                   "H=64, 128: per-token and union 2 / 4 / 8 (where G*H is legal), each with and "
                                   "without topk_length, FlashMLA (heads zero-padded to a multiple of 64 inside "
                                   "the timed call, with and without topk_length) and plain torch bf16 (H=8); the "
                                   "union builds alone, and the per-token path's row compaction where it runs "
                                   "the ping-pong tile; then each path with topk_length against it without, in "
                                   "paired rounds. With --model: whole-prefill latency per backend.")
    p.add_argument("--quick", action="store_true", help="shorter timing runs")
    p.add_argument("--points", default=DEFAULT_POINTS, help="BxS:H points, comma-separated (default: %(default)s)")
    p.add_argument("--pair-rounds", type=int, default=5,
                   help="alternating rounds of each path with topk_length against it without, and of the "
                        "--paired backends (0: none)")
    p.add_argument("--paired", default=None, metavar="A,B",
                   help="also time backends A and B of the table alternately at every point (e.g. "
                        "per-token,flashmla+len): a verdict within the noise")
    p.add_argument("--fp64", action="store_true",
                   help="gate and record rel-L2 against the fp64 reference (not fp32) and print our worst "
                        "path against FlashMLA's best")
    p.add_argument("--ceilings", action="store_true",
                   help="first print the GPU's ceilings: HBM copy, bf16 matmul, the gather floor per point")
    p.add_argument("--indices", default=None,
                   help="captured index trace (glmcheck capture-indices) to use; with --model: model (the "
                        "indexer's own top-k, default) or calibrated (replaced by calibrated indices for timing)")
    p.add_argument("--trace-layer", type=int, default=None, help="layer of the trace (default: the first)")
    p.add_argument("--index-mode", default="calibrated", choices=list(INDEX_MODES))
    p.add_argument("--timing", default="eager", choices=list(TIMINGS),
                   help="eager: time the Python call (host launch cost included; a small point can "
                        "measure the host); graph: time each call's CUDA-graph replay (GPU time alone, "
                        "every backend alike; the replay passes the same gate first)")
    p.add_argument("--model", default=None, help="model-level prefill latency for this preset")
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--experts", type=int, default=None)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--tokens", default="2048,4096,8192", help="model-level prompt lengths")
    p.add_argument("--backends", default=None,
                   help="model-level rows NAME[+len][+rebuild] (+len: topk_length passed; +rebuild: a plan per call, "
                        "not one per indexer selection); default: FlashMLA+len when present, per-token, each legal "
                        "union reused and rebuilt, hf_sdpa")
    p.add_argument("--out", default=None, help="record directory (default runs/bench-<timestamp>); an existing record "
                                               "or non-empty directory is refused unless --overwrite")
    p.add_argument("--overwrite", action="store_true", help="replace the record in --out")
    p.add_argument("--kv-cache-dtype", default=None, choices=["bf16", "fp8_e4m3"],
                   help="fp8_e4m3: the rows are DSA's FP8 pool; our paths timed on its values and with the "
                        "dequantisation in the call (+deq), FlashMLA's FP8 decode kernel (flashmla_kv) on the pool; "
                        "with --model every row over the FP8 pool and a flashmla_kv row")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    """What needs no GPU (`glmcheck.cli` runs it before any heavy import)."""
    check_out_dir(ns.out, overwrite=ns.overwrite)
    check_layers(ns.layers)
    check_experts(ns.experts)
    if ns.model and ns.timing != "eager":
        raise ValueError(f"--timing {ns.timing} applies to the kernel bench; --model times whole prefills eagerly")
    if ns.pair_rounds < 0:
        raise ValueError(f"--pair-rounds must be >= 0, got {ns.pair_rounds}")


def _write(ns: argparse.Namespace, command: str, summary: dict, rows: list[dict]) -> Path:
    """The record in --out (its earlier record removed first with --overwrite) or a fresh runs/ folder."""
    import pandas as pd

    from glmcheck.records.layout import clear_record
    from glmcheck.records.store import default_run_dir, write_record

    directory = Path(ns.out) if ns.out else default_run_dir(command)
    if ns.overwrite:
        clear_record(directory)
    write_record(directory, summary, pd.DataFrame(rows))
    return directory


def _require_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        raise ValueError("bench needs a CUDA GPU (timings of the CPU interpreter mean nothing)")


def _trace_points(ns) -> list[tuple]:
    """[(BenchPoint, indices)] of the --indices trace's layer."""
    from glmcheck.bench.kernel import BenchPoint
    from glmcheck.data.traces import read_trace

    layers, meta = read_trace(ns.indices)
    layer = ns.trace_layer if ns.trace_layer is not None else next(iter(layers))
    if layer not in layers:
        raise ValueError(f"--trace-layer {layer} is not in the trace (layers {sorted(layers)})")
    seq_lens = meta.get("seq_lens") or [layers[layer].shape[0]]
    return [(BenchPoint(len(seq_lens), seq_lens[0], 8), layers[layer])]


def handle(ns: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from glmcheck.backends import flashmla_available
    from glmcheck.bench.kernel import default_specs, length_pairs, parse_points, run_point
    from glmcheck.bench.report import render_accuracy, render_table
    from glmcheck.records.environment import environment_metadata

    precheck(ns)
    _require_gpu()
    if ns.model:
        return _handle_model(ns)
    points = _trace_points(ns) if ns.indices else [(point, None) for point in parse_points(ns.points)]
    have_flash, source = flashmla_available()
    specs = default_specs(have_flash, ns.kv_cache_dtype)
    pairs = length_pairs(specs) + _paired(ns.paired, specs)
    if ns.ceilings:
        _print_ceilings(points)
    reference = "fp64" if ns.fp64 else "fp32"
    results = []
    for point, indices in tqdm(points, desc="bench points", disable=ns.quiet, leave=False):
        results += run_point(point, specs, quick=ns.quick, mode=ns.index_mode, indices=indices, timing=ns.timing,
                             pairs=pairs, pair_rounds=ns.pair_rounds,
                             reference_dtype=torch.float64 if ns.fp64 else torch.float32,
                             kv_cache_dtype=ns.kv_cache_dtype)
    table = "\n\n".join(part for part in (render_table(results), render_accuracy(results, reference)) if part)
    print(f"FlashMLA: {source}" if have_flash else f"FlashMLA absent ({source})")
    print(f"timing: {ns.timing}" + (" (CUDA-graph replay: GPU time without host launch cost)" if ns.timing == "graph"
                                    else " (the Python call, host launch cost included)"))
    print(table)
    rows = [dataclasses.asdict(r) | {"point": r.point.label} for r in results]
    summary = {"command": "bench", "environment": environment_metadata(), "index_mode": ns.index_mode,
               "timing": ns.timing, "points": ns.points, "pair_rounds": ns.pair_rounds, "paired": ns.paired,
               "reference": reference, "kv_cache_dtype": ns.kv_cache_dtype,
               "indices": ns.indices, "rows": rows, "table": table}
    directory = _write(ns, "bench", summary, rows)
    print(f"record: {directory}")
    return 0


def _paired(text: str | None, specs) -> list[tuple[str, str]]:
    """The --paired pair of backend names; ValueError naming --paired and the choices otherwise."""
    if text is None:
        return []
    names = [name.strip() for name in text.split(",")]
    known = [spec.name for spec in specs]
    if len(names) != 2 or names[0] == names[1] or any(name not in known for name in names):
        raise ValueError(f"--paired takes two different backends of {', '.join(known)} as A,B; got {text!r}")
    return [(names[0], names[1])]


def _print_ceilings(points: list) -> None:
    """The GPU's ceilings for this workload (`glmcheck.bench.ceilings`), before the timings."""
    from glmcheck.bench.ceilings import copy_tb_per_s, gather_floor, matmul_tflops

    print(f"HBM copy: {copy_tb_per_s():.2f} TB/s (read + write); bf16 8192^3 matmul: {matmul_tflops():.0f} TFLOP/s")
    rows = []
    for point in dict.fromkeys(point for point, _ in points):
        floor = gather_floor(point)
        rows.append([floor.point, f"{floor.gigabytes:.2f}", f"{floor.ms:.3f}", f"{floor.tb_per_s:.2f}"])
    print(markdown_table(["point", "row bytes read (GB)", "gather-only ms (floor)", "TB/s"], rows))


MODEL_INDICES = ("model", "calibrated")


def _handle_model(ns) -> int:
    import torch
    from tqdm import tqdm

    from glmcheck.backends.validation import validate_backends
    from glmcheck.bench.model import bench_prefill, default_rows, parse_rows, weighting_schedule
    from glmcheck.bench.report import render_model_table
    from glmcheck.checks.runner import SwapOptions
    from glmcheck.data.indices import calibrated_selector
    from glmcheck.data.model_prompts import model_prompt, prompt_source
    from glmcheck.evaluate.backend_choice import default_backends
    from glmcheck.kernels import legal_groups
    from glmcheck.model.load import ModelSpec, config_of, load_model
    from glmcheck.records.environment import environment_metadata

    indices = ns.indices or "model"
    if indices not in MODEL_INDICES:
        raise ValueError(f"--indices with --model takes one of {', '.join(MODEL_INDICES)} (calibrated: the "
                         f"indexer's top-k replaced for timing runs), got {indices!r}")
    spec = ModelSpec(ns.model, None, ns.layers, ns.experts)
    device = torch.device("cuda")
    lengths = [int(t) for t in ns.tokens.split(",") if t.strip()]
    config = config_of(spec, layer0_only=True)
    heads = config.num_attention_heads // ns.tp
    latent = (config.kv_lora_rank, config.qk_rope_head_dim)
    flash = "flashmla_sparse" in default_backends(device, heads, latent)
    fp8 = ns.kv_cache_dtype == "fp8_e4m3"
    rows = parse_rows(ns.backends) if ns.backends else default_rows(legal_groups(heads), flash, fp8=fp8)
    for warning in validate_backends(list(dict.fromkeys(r.backend for r in rows)), device=device,
                                     heads=config.num_attention_heads, tp=ns.tp, latent_dims=latent,
                                     kv_cache_dtype="fp8_e4m3" if fp8 else None):
        print(f"warning: {warning}")
    model = load_model(spec, device)
    options = SwapOptions(tp=ns.tp, selector=calibrated_selector() if indices == "calibrated" else None,
                          kv_cache_dtype="fp8_e4m3" if fp8 else None)
    with tqdm(total=len(lengths) * len(rows), desc="prefill", disable=ns.quiet, leave=False) as bar:
        timings = bench_prefill(model, lengths, rows, options, progress=bar,
                                prompt=lambda n, key: model_prompt(spec, model.config.vocab_size, n, key, device))
    schedule = weighting_schedule(spec)
    table = render_model_table(timings, ns.tp, schedule.count("full"), schedule.count("shared"))
    print(f"model: {spec.describe()}, tp {ns.tp} ({heads} heads per rank slice, run one after another); indices: "
          + ("calibrated (every indexer's top-k replaced by calibrated indices for timing)" if indices == "calibrated"
             else "the model's own indexer") + f"; prompts: {prompt_source(spec)}")
    ran = config_of(spec).indexer_types
    print(f"schedule: each layer kind's mean over the {len(ran)} layers that ran ({ran.count('full')} full, "
          f"{ran.count('shared')} shared), weighted over the model's {len(schedule)} ({schedule.count('full')} full, "
          f"{schedule.count('shared')} shared indexer layers)")
    print(table)
    rows_out = [dataclasses.asdict(t) for t in timings]
    directory = _write(ns, "bench-model", {"command": "bench-model", "environment": environment_metadata(),
                                           "rows": rows_out, "model": spec.describe(), "tp": ns.tp,
                                           "indices": indices, "kv_cache_dtype": ns.kv_cache_dtype, "table": table},
                       rows_out)
    print(f"record: {directory}")
    return 0 if all(t.passed for t in timings) else 1
