"""`capture_trace`: run seeded prompts through a model and write every full indexer layer's top-k (kernel
convention: index > t -> -1) to a safetensors trace (`glmcheck.data.traces`), as a `Report`."""

from __future__ import annotations

import time
from pathlib import Path

from glmcheck.evaluate.options import CheckOptions
from glmcheck.evaluate.report import Report


class CaptureOutOfMemory(ValueError):
    """The capture's forward ran out of device memory (a usage error: the request is too large)."""


def capture_trace(options: CheckOptions, out: str | Path, *, tokens: int, batch: int = 1,
                  backend: str | None = None) -> Report:
    """`batch` seeded prompts of `tokens` tokens through the model of `options` (model, checkpoint, layers,
    experts, seed, init, device), the attention through `backend` (an absorbed sparse backend; default the kernel
    under test on a GPU, the fp32 reference on the CPU); the trace goes to `out`. ValueError, before the model is
    built, for a dense backend, a prompt past the model's positions or memory; `CaptureOutOfMemory` when the
    forward runs out of memory. The Report's rows are one per captured layer; its render says what was written."""
    import torch

    from glmcheck.backends import resolve_backend
    from glmcheck.checks.band import PASS
    from glmcheck.data.model_prompts import model_prompt
    from glmcheck.data.traces import capture_indices, write_trace
    from glmcheck.model.load import ModelSpec, config_of, load_model, resolve_device
    from glmcheck.model.memory import check_fits
    from glmcheck.model.swap import HF_BACKENDS
    from glmcheck.records.environment import config_hash

    spec = ModelSpec(options.model, options.checkpoint, options.layers, options.experts, options.seed, options.init)
    device = resolve_device(options.device)
    backend = backend or ("triton_sparse_mla" if device.type == "cuda" else "reference")
    if backend in HF_BACKENDS:
        raise ValueError(f"--backend {backend}: captures run the absorbed sparse path (the dense masked attention "
                         f"does not fit at long prompts); choose a kernel-level backend")
    resolve_backend(backend)
    config = config_of(spec)
    check_fits(config, tokens * batch, device, "--tokens x --batch")
    positions = getattr(config, "max_position_embeddings", None)
    if positions is not None and tokens > positions:
        raise ValueError(f"--tokens {tokens}: more than the model's {positions} positions")
    start = time.perf_counter()
    model = load_model(spec, device)
    prompts = torch.cat([model_prompt(spec, model.config.vocab_size, tokens, options.seed + b, device)
                         for b in range(batch)])
    loaded = time.perf_counter()
    try:
        layers = capture_indices(model, prompts, backend)
    except torch.OutOfMemoryError:
        raise CaptureOutOfMemory(f"capture of {batch} x {tokens} tokens ran out of memory on {device}; use fewer "
                                 f"--tokens, --batch or --layers (`glmcheck plan` estimates the need)") from None
    metadata = {"model": spec.describe(), "config_hash": config_hash(model.config), "backend": backend,
                "seq_lens": [tokens] * batch, "topk": model.config.index_topk}
    write_trace(out, layers, metadata)
    line = (f"wrote {len(layers)} full indexer layers ({sorted(layers)}) of {batch} x {tokens} tokens to {out} "
            f"(attention: {backend}; load {loaded - start:.1f} s, capture {time.perf_counter() - loaded:.1f} s)")
    rows = [{"layer": layer, "tokens": int(indices.shape[0]), "topk": int(indices.shape[-1])}
            for layer, indices in sorted(layers.items())]
    return Report("capture-indices", PASS, rows, {"trace": str(out), "backend": backend},
                  {**spec.describe(), "config_hash": metadata["config_hash"]}, {"tokens": tokens, "batch": batch},
                  extra={"table": line})
