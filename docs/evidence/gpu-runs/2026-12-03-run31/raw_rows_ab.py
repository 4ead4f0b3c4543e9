"""Prepared for the next GPU run (issue 43 item 4), not run in run 30: the per-token path with and without its
compaction pass (`_raw_token_rows`, RAW_ROWS) against FlashMLA+len, CUDA-graph replays, rounds alternating, medians.
Each call's replay is gated first against FlashMLA+len's output (rel-L2 < 5e-3; both are ~2e-3 from fp64); the raw
path must also equal the compacted one bit for bit here (no empty slot below topk_length at these points).

    python3 docs/gpu-runs/2026-12-03-run30/raw_rows_ab.py 1x2048:64,1x2048:128,1x8192:64,1x8192:128 calibrated,drift10
"""
import statistics, sys, torch
from glmcheck.bench.kernel import BenchPoint, make_inputs, time_ms, capture_graph
from glmcheck.kernels.prefill import sparse_mla_prefill
from glmcheck.backends.flashmla import flashmla_sparse_prefill


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


for label in sys.argv[1].split(","):
    for mode in sys.argv[2].split(","):
        shape, heads = label.split(":")
        b, n = (int(v) for v in shape.split("x"))
        x = make_inputs(BenchPoint(b, n, int(heads)), mode=mode)
        calls = {
            "compacted": lambda: sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, 512, topk_length=x.topk_length),
            "raw": lambda: sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, 512, topk_length=x.topk_length,
                                              _raw_token_rows=True),
            "flashmla+len": lambda: flashmla_sparse_prefill(x.q, x.kv, x.indices, x.sm_scale, 512,
                                                            topk_length=x.topk_length),
        }
        ref = calls["flashmla+len"]()
        assert torch.equal(calls["raw"](), calls["compacted"]()), f"{label} {mode}: raw differs from compacted"
        replays = {}
        for name, fn in calls.items():
            replay, out = capture_graph(fn)
            out.fill_(float("nan"))
            replay()
            assert rel(out, ref) < 5e-3, (label, mode, name, rel(out, ref))
            replays[name] = (replay, out)  # the output stays alive while its graph is replayed
        times = {name: [] for name in calls}
        for round_ in range(7):
            for name in (list(calls) if round_ % 2 == 0 else list(reversed(calls))):
                times[name].append(time_ms(replays[name][0], rep_ms=200))
        med = {k: statistics.median(v) for k, v in times.items()}
        pairs = [a / c for a, c in zip(times["raw"], times["flashmla+len"])]
        print(f"{label} {mode}: " + "  ".join(f"{k} {v:.4f}" for k, v in med.items())
              + f"  | raw/compacted {med['raw'] / med['compacted']:.3f}  raw/flashmla {med['raw'] / med['flashmla+len']:.3f}"
              + f" (rounds {min(pairs):.3f}-{max(pairs):.3f})", flush=True)
