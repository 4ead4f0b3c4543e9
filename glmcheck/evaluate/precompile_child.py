"""The precompile child's work (`python -m glmcheck.evaluate.precompile_child SPEC_JSON`, started by
`glmcheck.checks.precompile.start`): the check's band and backends resolved as the check resolves them, compile ahead
run on the calls its spec predicts, Triton's on-disk cache filled for the parent. Its output is discarded; it exits
0 when done (without CUDA and no device named: nothing run), 2 for bad usage.

When hf_sdpa is a row, a thread also calls torch's masked SDPA once per predicted length (transformers' dense path
with a bool mask): on a fresh machine the CUDA driver compiles some of those kernels from PTX at their first use,
once per machine (its ~/.nv/ComputeCache), which cost hf_sdpa's first forwards on a machine 5 s of firsttoken and 2 s of layer0
(docs/performance.md, "Compile in a second process").
"""

from __future__ import annotations

import sys
import threading

from glmcheck.checks.precompile import CALL_BYTES, DEVICE_SHARE, PrecompileSpec, predicted_calls, prompt_lengths

SDPA_MAX_TOKENS = 8192  # longer prompts' [T, T] masks are not worth warming for (one call of one length suffices)


def warm_sdpa(spec: PrecompileSpec, device) -> int:
    """One masked `scaled_dot_product_attention` a predicted length (at most SDPA_MAX_TOKENS; bf16, a causal bool
    mask, the model's head dims, 8 heads): the CUDA driver's first-use compiles of the kernels hf_sdpa will take.
    Returns the calls made."""
    import torch
    import torch.nn.functional as F

    if spec.qk_head_dim < 1 or spec.v_head_dim < 1:
        return 0
    calls = 0
    with torch.inference_mode():
        for tokens in prompt_lengths(spec):
            if tokens > SDPA_MAX_TOKENS:
                continue
            q = torch.zeros(1, 8, tokens, spec.qk_head_dim, device=device, dtype=torch.bfloat16)
            v = torch.zeros(1, 8, tokens, spec.v_head_dim, device=device, dtype=torch.bfloat16)
            mask = torch.ones(1, 1, tokens, tokens, device=device, dtype=torch.bool).tril_()
            F.scaled_dot_product_attention(q, q, v, attn_mask=mask)
            calls += 1
    return calls


def run(spec: PrecompileSpec) -> list[str]:
    """The child's work: compile ahead over `predicted_calls` for the check's band and backends on its device
    (default: CUDA; none there, nothing is run); returns the backends run."""
    import torch

    from glmcheck.backends.validation import HF_NAMES
    from glmcheck.checks.band import band_names
    from glmcheck.checks.compile_ahead import compile_ahead
    from glmcheck.evaluate.backend_choice import choose_backends
    from glmcheck.evaluate.options import EXACT

    if spec.device is None and not torch.cuda.is_available():
        return []
    device = torch.device(spec.device or "cuda")
    named = None if spec.backends is None else [b.strip() for b in spec.backends.split(",") if b.strip()]
    kv_cache_dtype = None if spec.kv_cache_dtype == "bf16" else spec.kv_cache_dtype
    choice = choose_backends(named, device=device, heads=spec.heads, tp=spec.tp,
                             latent_dims=(spec.latent_dim, spec.rope_dim), band_size=spec.band,
                             exact=EXACT.get(spec.exact, spec.exact), baseline=spec.baseline,
                             deterministic=spec.deterministic, kv_cache_dtype=kv_cache_dtype)
    names = [*band_names(spec.band), *(b for b in choice.backends if b not in HF_NAMES)]
    sdpa = threading.Thread(target=warm_sdpa, args=(spec, device), name="glmcheck-sdpa-warm")
    if "hf_sdpa" in choice.backends:
        sdpa.start()
    budget = CALL_BYTES
    if device.type == "cuda":  # the check's own forwards share the device with the child: keep to a small part of it
        budget = min(budget, torch.cuda.get_device_properties(device).total_memory // DEVICE_SHARE)
    calls = predicted_calls(spec, device, budget)
    try:
        return compile_ahead(calls, names, deterministic=spec.deterministic, kv_cache_dtype=kv_cache_dtype)
    finally:
        if sdpa.is_alive():
            sdpa.join()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m glmcheck.evaluate.precompile_child SPEC_JSON", file=sys.stderr)
        return 2
    from glmcheck.process.bytecode import use_private_cache

    use_private_cache()  # as the parent: GLMCHECK_PYCACHE's bytecode serves this process's imports too
    run(PrecompileSpec.from_json(args[0]))
    return 0


if __name__ == "__main__":
    from glmcheck.process import fast_exit

    fast_exit.arm()  # the check waits for this process to end: its teardown (~1 s) would be the check's wait
    sys.exit(fast_exit.finish(main()))
