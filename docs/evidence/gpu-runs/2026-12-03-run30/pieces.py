"""GPU run 30 (issue 43 item 4): where the per-token path's time goes at the 64-head points. CUDA-graph replays,
rounds alternating, medians: the compaction alone (token_row_sets), the ping-pong tile with a ready plan, the whole
per-token+len call, FlashMLA+len. Every call gated against fp32 first (rel-L2 <= 1e-2 of the bench's gate family)."""
import sys, statistics, torch
from glmcheck.bench.kernel import BenchPoint, make_inputs, time_ms, capture_graph
from glmcheck.kernels.prefill import sparse_mla_prefill
from glmcheck.kernels.plan import plan_sparse_mla
from glmcheck.kernels.union import token_row_sets
from glmcheck.backends.flashmla import flashmla_sparse_prefill

def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())

for label in sys.argv[1].split(","):
    for mode in sys.argv[2].split(","):
        shape, heads = label.split(":")
        b, n = (int(v) for v in shape.split("x"))
        x = make_inputs(BenchPoint(b, n, int(heads)), mode=mode)
        S = x.kv.shape[0]
        plan = plan_sparse_mla(x.indices, num_kv_rows=S, num_heads=x.q.shape[1], topk_length=x.topk_length)
        ref = flashmla_sparse_prefill(x.q, x.kv, x.indices, x.sm_scale, 512, topk_length=x.topk_length)
        calls = {
            "compaction": lambda: token_row_sets(x.indices, x.topk_length, S).rows,
            "pingpong+plan": lambda: sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, 512, topk_length=x.topk_length, plan=plan),
            "per-token+len": lambda: sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, 512, topk_length=x.topk_length),
            "flashmla+len": lambda: flashmla_sparse_prefill(x.q, x.kv, x.indices, x.sm_scale, 512, topk_length=x.topk_length),
        }
        replays = {}
        for name, fn in calls.items():
            replay, out = capture_graph(fn)
            if name != "compaction":
                out.fill_(float("nan")); replay()
                r = rel(out, ref)
                assert r < 5e-3, (name, r)
            replays[name] = (replay, out)
        times = {name: [] for name in calls}
        for round_ in range(5):
            order = list(calls) if round_ % 2 == 0 else list(reversed(calls))
            for name in order:
                times[name].append(time_ms(replays[name][0], rep_ms=200))
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{label} {mode}: " + "  ".join(f"{k} {v:.4f} ({min(times[k]):.4f}-{max(times[k]):.4f})" for k, v in med.items())
              + f"  | per-token/flashmla {med['per-token+len'] / med['flashmla+len']:.3f}"
              + f"  pingpong+plan/flashmla {med['pingpong+plan'] / med['flashmla+len']:.3f}", flush=True)
