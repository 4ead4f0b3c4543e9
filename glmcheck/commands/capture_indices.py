"""`glmcheck capture-indices`: record every full indexer layer's top-k from a model run."""

from __future__ import annotations

import argparse
import time

from glmcheck.arguments import check_count, check_experts, check_layers, check_out_file, check_seed
from glmcheck.model.names import model_names
from glmcheck.model.references import DEFAULT_MODEL


def add_parser(sub) -> None:
    p = sub.add_parser("capture-indices", help="record every full indexer layer's top-k from a model run",
                       description="Run seeded prompts through the model and write each full indexer layer's "
                                   "top-k (kernel convention: index > t -> -1) to a safetensors trace.")
    p.add_argument("--model", default=DEFAULT_MODEL, choices=model_names(),
                   help=f"reference model or dummy preset (default {DEFAULT_MODEL})")
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--experts", type=int, default=None)
    p.add_argument("--init", default="sharp", choices=["hf", "sharp"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None)
    p.add_argument("--tokens", type=int, required=True, help="tokens per sequence")
    p.add_argument("--batch", type=int, default=1, help="independent sequences (one KV pool)")
    p.add_argument("--out", required=True, help="trace file (.safetensors); an existing file is refused unless "
                                                "--overwrite")
    p.add_argument("--overwrite", action="store_true", help="replace the file --out names")
    p.add_argument("--backend", default=None,
                   help="attention backend of the run (absorbed sparse path; default: the kernel under test on a "
                        "GPU, the fp32 reference on the CPU)")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    """What needs no model (`glmcheck.cli` runs it before any heavy import)."""
    check_count(ns.tokens, "--tokens")
    check_count(ns.batch, "--batch")
    if not ns.checkpoint:  # with one, config_of refuses any --layers / --experts but its own
        check_layers(ns.layers)
        check_experts(ns.experts)
    check_seed(ns.seed)
    check_out_file(ns.out, suffix=".safetensors", overwrite=ns.overwrite)


def handle(ns: argparse.Namespace) -> int:
    import torch

    from glmcheck.backends import resolve_backend
    from glmcheck.data.model_prompts import model_prompt
    from glmcheck.data.traces import write_trace
    from glmcheck.model.load import ModelSpec, config_of, load_model, resolve_device
    from glmcheck.model.plan import check_fits
    from glmcheck.model.swap import HF_BACKENDS
    from glmcheck.records.environment import config_hash

    precheck(ns)
    spec = ModelSpec(ns.model, ns.checkpoint, ns.layers, ns.experts, ns.seed, ns.init)
    device = resolve_device(ns.device)
    backend = ns.backend or ("triton_sparse_mla" if device.type == "cuda" else "reference")
    if backend in HF_BACKENDS:
        raise ValueError(f"--backend {backend}: captures run the absorbed sparse path (the dense masked attention "
                         f"does not fit at long prompts); choose a kernel-level backend")
    resolve_backend(backend)
    config = config_of(spec)
    check_fits(config, ns.tokens * ns.batch, device, "--tokens x --batch")
    positions = getattr(config, "max_position_embeddings", None)
    if positions is not None and ns.tokens > positions:
        raise ValueError(f"--tokens {ns.tokens}: more than the model's {positions} positions")
    start = time.perf_counter()
    model = load_model(spec, device)
    prompts = torch.cat([model_prompt(spec, model.config.vocab_size, ns.tokens, ns.seed + b, device)
                         for b in range(ns.batch)])
    loaded = time.perf_counter()
    try:
        layers = capture_indices(model, prompts, backend)
    except torch.OutOfMemoryError:
        raise CaptureOutOfMemory(f"capture of {ns.batch} x {ns.tokens} tokens ran out of memory on {device}; "
                                 f"use fewer --tokens, --batch or --layers (`glmcheck plan` estimates the need)") \
            from None
    metadata = {"model": spec.describe(), "config_hash": config_hash(model.config), "backend": backend,
                "seq_lens": [ns.tokens] * ns.batch, "topk": model.config.index_topk}
    write_trace(ns.out, layers, metadata)
    print(f"wrote {len(layers)} full indexer layers ({sorted(layers)}) of {ns.batch} x {ns.tokens} tokens "
          f"to {ns.out} (attention: {backend}; load {loaded - start:.1f} s, capture "
          f"{time.perf_counter() - loaded:.1f} s)")
    return 0


def capture_indices(model, prompts, backend: str) -> dict:
    """`glmcheck.data.traces.capture_indices`, imported when a capture runs (this module registers the parser
    without torch)."""
    from glmcheck.data.traces import capture_indices as capture

    return capture(model, prompts, backend)


class CaptureOutOfMemory(ValueError):
    """The capture's forward ran out of device memory (a usage error: the request is too large)."""
