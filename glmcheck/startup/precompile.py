"""Compile a model check's Triton kernels in a second process while the check imports and builds its model.

Compile ahead (`glmcheck.startup.compile_ahead`) runs after the exact reference's forward, which comes after the
imports (11-17 s on the H200 image) and the build: on a cold Triton cache (a fresh machine, or a kernel just edited)
the check then still waits for the slowest backend's compiles (docs/performance.md, "Compile in a second process").
Yet a check's attention calls follow from its options alone (`glmcheck.startup.prediction`). So the command line,
before its own heavy imports, hands `start` the check's `PrecompileSpec`, which runs this module as a child
(`python -m glmcheck.startup.precompile SPEC_JSON`): it imports only torch, Triton and glmcheck's backends, resolves
the check's band and backends as the check does, makes the predicted calls with seeded contents and runs compile
ahead on them, filling Triton's on-disk cache, which the parent shares. The parent's compile ahead waits for the child
(`glmcheck.startup.child.wait`) and then finds those variants cached. A variant the prediction misses compiles in the
parent as before: the child changes when things compile, never what a check computes. The child's output is
discarded; it exits 0 when done (without CUDA and no device named: nothing run), 2 for bad usage.

When (`wanted`): a CUDA device node exists, not Triton's interpreter, not under torchrun, `GLMCHECK_COMPILE_AHEAD` and
`GLMCHECK_PRECOMPILE` not 0 (`GLMCHECK_PRECOMPILE=1` starts it without a device node: tests).

When hf_sdpa is a row, a thread of the child also calls torch's masked SDPA once per predicted length (transformers'
dense path with a bool mask): on a fresh machine the CUDA driver compiles some of those kernels from PTX at their
first use, once per machine (its ~/.nv/ComputeCache), which cost hf_sdpa's first forwards on a machine 5 s of
firsttoken and 2 s of layer0 (docs/performance.md, "Compile in a second process").
"""

from __future__ import annotations

import glob
import os
import sys
import threading

from glmcheck.startup import child
from glmcheck.startup.prediction import CALL_BYTES, DEVICE_SHARE, PrecompileSpec, predicted_calls, prompt_lengths

ENV = "GLMCHECK_PRECOMPILE"
_OFF = ("0", "false", "no", "off")


def wanted(device: str | None = None) -> bool:
    """Whether a check on `device` (None: the default) should start the child (module docstring)."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice in _OFF or os.environ.get("GLMCHECK_COMPILE_AHEAD", "").strip().lower() in _OFF:
        return False
    if os.environ.get("TRITON_INTERPRET", "") not in ("", "0") or "WORLD_SIZE" in os.environ:
        return False
    if device is not None and not str(device).startswith("cuda"):
        return False
    if choice in ("1", "true", "yes", "on"):
        return True
    return os.environ.get("CUDA_VISIBLE_DEVICES", None) not in ("", "-1") and bool(glob.glob("/dev/nvidia[0-9]*"))


def start(spec: PrecompileSpec) -> bool:
    """Start the child (this module) for `spec`, one per process (`glmcheck.startup.child`); the caller asks
    `wanted` first. Returns whether a child was started; never raises for the child's sake: a check runs the same
    without it."""
    return child.start([sys.executable, "-m", __spec__.name, spec.to_json()])


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

    from glmcheck.backends.choice import choose_backends
    from glmcheck.backends.forms import Forms, band_default, reference_default, using
    from glmcheck.backends.names import EXACT, band_names
    from glmcheck.backends.validation import HF_NAMES
    from glmcheck.startup.compile_ahead import compile_ahead

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
    chosen = Forms(spec.band_impl or band_default(), spec.reference_impl or reference_default())
    try:
        with using(chosen):  # the check's forms: the band's Triton form compiles only where the check runs it
            return compile_ahead(calls, names, deterministic=spec.deterministic, kv_cache_dtype=kv_cache_dtype)
    finally:
        if sdpa.is_alive():
            sdpa.join()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {__spec__.name} SPEC_JSON", file=sys.stderr)
        return 2
    from glmcheck.startup.bytecode import use_private_cache

    use_private_cache()  # as the parent: GLMCHECK_PYCACHE's bytecode serves this process's imports too
    run(PrecompileSpec.from_json(args[0]))
    return 0


if __name__ == "__main__":
    from glmcheck.process import fast_exit

    fast_exit.arm()  # the check waits for this process to end: its teardown (~1 s) would be the check's wait
    sys.exit(fast_exit.finish(main()))
