"""GPU run 40, call 2: can the indexer's two products be computed faster with the same bits?

Today (transformers' formulation, glmcheck.model.indexer_chunks): scores = matmul(q [1,C,H,D] fp32, keys_t [1,1,D,S])
(a broadcast bmm: C batches of an [H, D] x [D, S] GEMM), relu(scores * scale), then matmul(w [1,C,1,H], scores)
(C batched GEMVs). Candidates: one [C*H, D] x [D, S] GEMM; the weighted sum as a Triton FMA chain over heads
(fused with the scale and the relu). Bits compared with torch.equal, per shape; times from CUDA events.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def weighted_kernel(s_ptr, w_ptr, out_ptr, S, scale, H: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < S
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for h in tl.static_range(H):
        x = tl.load(s_ptr + (row * H + h).to(tl.int64) * S + cols, mask=ok, other=0.0)
        x = tl.maximum(x * scale, 0.0)
        w = tl.load(w_ptr + row * H + h)
        acc = tl.fma(w, x, acc)
    tl.store(out_ptr + row.to(tl.int64) * S + cols, acc, mask=ok)


def timed(fn, reps=3):
    fn(); torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        out = fn()
    b.record(); torch.cuda.synchronize()
    return out, a.elapsed_time(b) / reps


torch.manual_seed(0)
print("H    D    S      C     | bmm ms  mm ms  same | gemv ms tri ms same addcmul-same | topk same")
for H, S_list in ((8, (1500, 2049, 4099, 16384, 32768)), (32, (2049, 4099, 16384))):
    D = 128
    for S in S_list:
        for C in sorted({37, 1000, max(32, (1 << 30) // (S * (4 * H + 17)))}):
            if C > S:
                continue
            q = torch.randn(1, C, H, D, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, S, D, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(1, C, H, device="cuda").mul_(H ** -0.5)
            keys_t = k.transpose(-1, -2).float().unsqueeze(1)
            scale = D ** -0.5
            A, t_bmm = timed(lambda: torch.matmul(q.float(), keys_t))
            B, t_mm = timed(lambda: torch.mm(q.float().reshape(C * H, D), keys_t[0, 0]).view(1, C, H, S))
            same_mm = torch.equal(A, B)
            R = A.clone().mul_(scale).relu_()
            W1, t_gemv = timed(lambda: torch.matmul(w.unsqueeze(-2), R).squeeze(-2))
            out = torch.empty(1, C, S, device="cuda")
            BLOCK = 1024
            W2, t_tri = timed(lambda: (weighted_kernel[(C, triton.cdiv(S, BLOCK))](A, w, out, S, scale, H=H, BLOCK=BLOCK), out)[1])
            same_tri = torch.equal(W1, W2)
            acc = torch.zeros(1, C, S, device="cuda")
            for h in range(H):
                acc = torch.addcmul(acc, w[..., h, None], R[:, :, h, :])
            same_add = torch.equal(W1, acc)
            k_top = min(2048, S)
            same_top = torch.equal(W1.topk(k_top, dim=-1).indices, W2.topk(k_top, dim=-1).indices)
            diff = (W1 != W2).sum().item()
            print(f"{H:<4} {D:<4} {S:<6} {C:<5} | {t_bmm:6.2f} {t_mm:6.2f} {same_mm!s:5} | {t_gemv:6.2f} {t_tri:6.2f} "
                  f"{same_tri!s:5} ({diff} differ) {same_add!s:5} | {same_top}", flush=True)
            del q, k, A, B, R, W1, W2, out, acc
            torch.cuda.empty_cache()
