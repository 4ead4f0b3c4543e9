"""GPU run 40, call 6: what makes hf_sdpa's forwards slow in the first glmcheck process of a machine? One ref-gpu
forward under hf_sdpa (60 tokens) timed in a fresh process, twice; the CUDA JIT cache (~/.nv/ComputeCache) measured
around each; then a bare masked SDPA call of the same shape in a third process."""
import os
import sys
import time
from pathlib import Path


def cache_bytes() -> int:
    root = Path.home() / ".nv" / "ComputeCache"
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root.exists() else -1


mode = sys.argv[1]
before = cache_bytes()
import torch  # noqa: E402

if mode == "model":
    from glmcheck.checks.runner import forward_under
    from glmcheck.data.model_prompts import model_prompt
    from glmcheck.evaluate.options import CheckOptions
    from glmcheck.evaluate.setup import Setup
    from glmcheck.model.load import load_model

    setup = Setup(CheckOptions(model="ref-gpu", quiet=True), one_prompt=True, tokens=60)
    model = load_model(setup.spec, setup.device)
    ids = model_prompt(setup.spec, model.config.vocab_size, 60, 0, setup.device)
    for name in ("reference", "hf_sdpa", "hf_sdpa", "hf_eager"):
        start = time.perf_counter()
        forward_under(model, ids, name, setup.options)
        torch.cuda.synchronize()
        print(f"{name}: {time.perf_counter() - start:.3f} s", flush=True)
else:
    import torch.nn.functional as F

    q = torch.randn(1, 8, 60, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 8, 60, 96, device="cuda", dtype=torch.bfloat16)
    mask = torch.ones(1, 1, 60, 60, device="cuda", dtype=torch.bool).tril_()
    for _ in range(2):
        start = time.perf_counter()
        F.scaled_dot_product_attention(q, q, v, attn_mask=mask)
        torch.cuda.synchronize()
        print(f"sdpa: {time.perf_counter() - start:.3f} s", flush=True)
print(f"ComputeCache bytes {before} -> {cache_bytes()}", flush=True)
