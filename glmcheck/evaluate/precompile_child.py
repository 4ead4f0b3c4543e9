"""The precompile child's work (`python -m glmcheck.evaluate.precompile_child SPEC_JSON`, started by
`glmcheck.checks.precompile.start`): the check's band and backends resolved as the check resolves them, compile ahead
run on the calls its spec predicts, Triton's on-disk cache filled for the parent. Its output is discarded; it exits
0 when done (without CUDA and no device named: nothing run), 2 for bad usage.
"""

from __future__ import annotations

import sys

from glmcheck.checks.precompile import PrecompileSpec, predicted_calls


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
    choice = choose_backends(named, device=device, heads=spec.heads, tp=spec.tp,
                             latent_dims=(spec.latent_dim, spec.rope_dim), band_size=spec.band,
                             exact=EXACT.get(spec.exact, spec.exact),
                             baseline=spec.baseline, deterministic=spec.deterministic,
                             kv_cache_dtype=None if spec.kv_cache_dtype == "bf16" else spec.kv_cache_dtype)
    names = [*band_names(spec.band), *(b for b in choice.backends if b not in HF_NAMES)]
    calls = predicted_calls(spec, device)
    return compile_ahead(calls, names, deterministic=spec.deterministic,
                         kv_cache_dtype=None if spec.kv_cache_dtype == "bf16" else spec.kv_cache_dtype)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m glmcheck.evaluate.precompile_child SPEC_JSON", file=sys.stderr)
        return 2
    run(PrecompileSpec.from_json(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
