"""`glmcheck bench`: correctness-gated kernel timings (`glmcheck.evaluate.bench_kernels`) or, with --model,
whole-prefill latency (`glmcheck.evaluate.bench_model`); its record written as every check's (`commands.common`)."""

from __future__ import annotations

import argparse

from glmcheck.bench.names import DEFAULT_POINTS, INDEX_MODES, TIMINGS
from glmcheck.commands.model_options import add_kv_cache_option
from glmcheck.evaluate.arguments import check_experts, check_layers, check_out_dir


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="kernel timings on the GPU, each point correctness-gated first",
                       description="Kernel benchmark, topk 2048, at the five headline points (1x2048, 1x4096, "
                                   "1x8192, 2x4096, 4x2048; H=8), 1x8192 at H=16, 32, 64, 96, 128 and 1x2048 at "
                                   "H=64, 128: per-token and union 2 / 4 / 8 (where G*H is legal), each with and "
                                   "without topk_length, FlashMLA (heads zero-padded to a multiple of 64 inside "
                                   "the timed call, with and without topk_length), SGLang's TileLang prefill "
                                   "(when $GLMCHECK_TILELANG_MODULE or an installed SGLang provides it; a shape it "
                                   "does not take is a refused cell) and plain torch bf16 (H=8); the "
                                   "union builds alone, and the per-token path's row compaction where it runs "
                                   "the ping-pong tile; then each path with topk_length against it without, in "
                                   "paired rounds. With --model: whole-prefill latency per backend.")
    p.add_argument("--quick", action="store_true", help="shorter timing runs")
    p.add_argument("--points", default=DEFAULT_POINTS, help="BxS:H points, comma-separated (default: %(default)s)")
    p.add_argument("--pair-rounds", type=int, default=5,
                   help="alternating rounds of each path with topk_length against it without, and of the "
                        "--paired backends (0: none)")
    p.add_argument("--paired", default=None, metavar="A,B[;C,D]",
                   help="also time backends A and B of the table alternately at every point (e.g. "
                        "per-token,flashmla+len; several pairs separated by ';'; 'best' is our fastest exact path "
                        "at each point, e.g. best,tilelang): a verdict within the noise")
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
    add_kv_cache_option(p, "fp8_e4m3: the rows are DSA's FP8 pool; our paths timed on its values and with the "
                           "dequantisation in the call (+deq), FlashMLA's FP8 decode kernel (flashmla_kv) on the "
                           "pool; with --model every row over the FP8 pool and a flashmla_kv row")
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


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.commands.common import run_report

    precheck(ns)
    if ns.model:
        from glmcheck.evaluate import bench_model

        return run_report(ns, "bench-model", lambda record_dir: bench_model(
            ns.model, layers=ns.layers, experts=ns.experts, tp=ns.tp, tokens=ns.tokens, backends=ns.backends,
            indices=ns.indices, kv_cache_dtype=ns.kv_cache_dtype, quiet=ns.quiet,
            warn=lambda line: print(f"warning: {line}")))
    from glmcheck.evaluate import bench_kernels

    return run_report(ns, "bench", lambda record_dir: bench_kernels(
        points=ns.points, indices=ns.indices, trace_layer=ns.trace_layer, index_mode=ns.index_mode, timing=ns.timing,
        quick=ns.quick, pair_rounds=ns.pair_rounds, paired=ns.paired, fp64=ns.fp64, ceilings=ns.ceilings,
        kv_cache_dtype=ns.kv_cache_dtype, quiet=ns.quiet))
