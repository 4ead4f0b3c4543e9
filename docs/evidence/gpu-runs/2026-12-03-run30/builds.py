"""GPU run 30 (issue 43, the schedule bar): the marks union build (G = 8, calibrated) at MARKS_BLOCK x BUILD_WARPS
variants; CUDA-graph replays, 5 alternating rounds, medians. Every variant's rows, bits and lengths equal the
default's first (exactly)."""
import statistics, sys, torch
from glmcheck.bench.kernel import synthetic_indices, time_ms, capture_graph
from glmcheck.kernels import union


def build(indices, kv_rows, block, warps):
    def call():
        union.MARKS_BLOCK, union.BUILD_WARPS = block, warps
        return union.build_union_sets(indices, 8, lengths, kv_rows, method="marks").rows
    return call


for label in sys.argv[1].split(","):
    b, n = (int(v) for v in label.split("x"))
    indices = synthetic_indices("calibrated", [n] * b, 2048, seed=0).cuda()
    from glmcheck.kernels.prefill import effective_lengths
    lengths = effective_lengths(indices, None, b * n)
    variants = [(1024, 8), (512, 4), (512, 8), (1024, 4), (1024, 16), (2048, 8), (2048, 16), (256, 4)]
    replays, ref = {}, None
    for block, warps in variants:
        union.MARKS_BLOCK, union.BUILD_WARPS = block, warps
        sets = union.build_union_sets(indices, 8, lengths, b * n, method="marks")
        torch.cuda.synchronize()
        live = torch.arange(sets.rows.shape[1], device="cuda")[None, :] < sets.lengths[:, None]
        got = (sets.lengths.clone(), torch.where(live, sets.rows, 0), torch.where(live, sets.bits.int(), 0))
        if ref is None:
            ref = got
        assert all(torch.equal(x, y) for x, y in zip(got, ref)), (block, warps)
        replays[(block, warps)] = capture_graph(build(indices, b * n, block, warps))[0]
    times = {v: [] for v in variants}
    for round_ in range(5):
        for v in (variants if round_ % 2 == 0 else list(reversed(variants))):
            times[v].append(time_ms(replays[v], rep_ms=100))
    base = statistics.median(times[(1024, 8)])
    print(f"{label} G=8: " + "  ".join(f"{v[0]}/{v[1]} {statistics.median(t) * 1000:.1f} us ({base / statistics.median(t):.2f}x)"
                                       for v, t in times.items()), flush=True)
