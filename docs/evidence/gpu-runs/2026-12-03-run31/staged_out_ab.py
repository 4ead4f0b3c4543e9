"""GPU run 31 (issue 43 item 4): the ping-pong tile's write-out staged through a free stage buffer and stored in
16-byte row pieces (STAGED_OUT, the default under test) against 4-byte stores straight from the MMA layout
(the former write-out), beside FlashMLA+len; CUDA-graph replays, 7 alternating rounds, medians (ms). Both forms
must give the same bits; each replay is gated against FlashMLA+len (rel-L2 < 5e-3).

    python3 docs/gpu-runs/2026-12-03-run31/staged_out_ab.py 1x2048:64,1x8192:64 calibrated,drift10
Points with H < 64 run the union path at G = 64 / H (build included)."""
import statistics, sys, torch
from glmcheck.bench.kernel import BenchPoint, make_inputs, time_ms, capture_graph
from glmcheck.kernels.gluon import launch
from glmcheck.kernels.prefill import sparse_mla_prefill
from glmcheck.backends.flashmla import flashmla_sparse_prefill


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def ours(x, union, staged):
    def call():
        launch.PINGPONG_STAGED_OUT = staged  # read at launch: each graph keeps the form it was captured with
        return sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, 512, topk_length=x.topk_length, union=union)
    return call


for label in sys.argv[1].split(","):
    for mode in sys.argv[2].split(","):
        shape, heads = label.split(":")
        b, n = (int(v) for v in shape.split("x"))
        x = make_inputs(BenchPoint(b, n, int(heads)), mode=mode)
        union = 64 // int(heads) if int(heads) < 64 else 0
        calls = {"direct": ours(x, union, False), "staged": ours(x, union, True),
                 "flashmla+len": lambda: flashmla_sparse_prefill(x.q, x.kv, x.indices, x.sm_scale, 512,
                                                                 topk_length=x.topk_length)}
        ref = calls["flashmla+len"]()
        assert torch.equal(calls["staged"](), calls["direct"]()), f"{label} {mode}: staged differs from direct"
        replays = {}
        for name, fn in calls.items():
            replay, out = capture_graph(fn)
            out.fill_(float("nan"))
            replay()
            assert rel(out, ref) < 5e-3, (label, mode, name, rel(out, ref))
            replays[name] = (replay, out)  # the output stays alive while its graph is replayed
        launch.PINGPONG_STAGED_OUT = True
        times = {name: [] for name in calls}
        for round_ in range(7):
            for name in (list(calls) if round_ % 2 == 0 else list(reversed(calls))):
                times[name].append(time_ms(replays[name][0], rep_ms=150))
        med = {k: statistics.median(v) for k, v in times.items()}
        pairs = [s / d for s, d in zip(times["staged"], times["direct"])]
        print(f"{label} {mode}: " + "  ".join(f"{k} {v:.4f}" for k, v in med.items())
              + f"  | staged/direct {med['staged'] / med['direct']:.3f} (rounds {min(pairs):.3f}-{max(pairs):.3f})"
              + f"  staged/flashmla {med['staged'] / med['flashmla+len']:.3f}"
              + f"  direct/flashmla {med['direct'] / med['flashmla+len']:.3f}", flush=True)
