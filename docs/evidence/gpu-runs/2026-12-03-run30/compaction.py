"""GPU run 30 (issue 43 item 4): the per-token compaction (token_row_sets) before and after the direct-slot kernel,
at BLOCK x num_warps variants; CUDA-graph replays, 5 alternating rounds, medians. Every variant's rows, bits and
lengths equal the old kernel's first (exactly)."""
import statistics, sys, torch, triton, triton.language as tl
from glmcheck.bench.kernel import BenchPoint, make_inputs, time_ms, capture_graph
from glmcheck.kernels.device_helpers import append_rows, load_group_slots
from glmcheck.kernels.token_rows import compact_token_rows_kernel


@triton.jit
def old_kernel(idx_ptr, length_ptr, rows_ptr, bits_ptr, len_ptr, num_kv_rows, topk, stride_it, stride_is, stride_r,
               stride_b, HAS_LENGTH: tl.constexpr, BLOCK: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK)
    ones = tl.full([BLOCK], 1, dtype=tl.int32)
    emitted = tl.zeros([], dtype=tl.int32)
    end = topk
    if HAS_LENGTH:
        end = tl.minimum(tl.maximum(tl.load(length_ptr + token), 0), topk)
    for start in range(0, end, BLOCK):
        row, _, valid = load_group_slots(idx_ptr, length_ptr, token, start + lanes, topk, topk, num_kv_rows,
                                         stride_it, stride_is, 1, HAS_LENGTH)
        emitted = append_rows(rows_ptr + token * stride_r, bits_ptr + token * stride_b, emitted, valid, row, ones, topk)
    tl.store(len_ptr + token, emitted)


def runner(kernel, x, block, warps):
    T, topk = x.indices.shape
    rows = torch.empty((T, topk), dtype=torch.int32, device="cuda")
    bits = torch.empty((T, topk), dtype=torch.uint8, device="cuda")
    lens = torch.empty((T,), dtype=torch.int32, device="cuda")

    def call():
        kernel[(T,)](x.indices, x.topk_length, rows, bits, lens, x.kv.shape[0], topk, x.indices.stride(0),
                     x.indices.stride(1), rows.stride(0), bits.stride(0), HAS_LENGTH=True, BLOCK=block, num_warps=warps)
        return rows
    return call, (rows, bits, lens)


for label in sys.argv[1].split(","):
    shape, heads = label.split(":")
    b, n = (int(v) for v in shape.split("x"))
    x = make_inputs(BenchPoint(b, n, int(heads)), mode="calibrated")
    variants = {"old 1024/4": (old_kernel, 1024, 4)}
    for block in (512, 1024, 2048):
        for warps in (4, 8):
            variants[f"new {block}/{warps}"] = (compact_token_rows_kernel, block, warps)
    replays, ref = {}, None
    for name, (kernel, block, warps) in variants.items():
        call, bufs = runner(kernel, x, block, warps)
        call(); torch.cuda.synchronize()
        live = torch.arange(bufs[0].shape[1], device="cuda")[None, :] < bufs[2][:, None]
        got = (bufs[2].clone(), torch.where(live, bufs[0], 0), torch.where(live, bufs[1].int(), 0))
        if ref is None:
            ref = got
        assert all(torch.equal(a, b) for a, b in zip(got, ref)), name
        replay, _ = capture_graph(call)
        # the graph holds no reference to the buffers it writes: keep them alive while it is replayed
        replays[name] = (lambda r=replay, _keep=(call, bufs): r())
    times = {name: [] for name in variants}
    for round_ in range(5):
        for name in (list(variants) if round_ % 2 == 0 else list(reversed(variants))):
            times[name].append(time_ms(replays[name], rep_ms=100))
    base = statistics.median(times["old 1024/4"])
    print(label + ": " + "  ".join(f"{k} {statistics.median(v) * 1000:.1f} us ({base / statistics.median(v):.2f}x)"
                                   for k, v in times.items()), flush=True)
