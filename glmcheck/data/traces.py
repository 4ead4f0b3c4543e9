"""Index traces: the DSA top-k of every "full" indexer layer of a model run, in kernel convention.

A trace file is a safetensors file with one int32 tensor `layer_<l>` [T, topk] per full
indexer layer l (index > t and empty slots -1, sequences at consecutive offsets of one KV pool)
and metadata: model description, tokens, seq_lens (JSON), seed. Written atomically.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from glmcheck.model.absorbed import kernel_indices
from glmcheck.model.swap import attention_modules, use_backend


def capture_indices(model: torch.nn.Module, input_ids: torch.Tensor,
                    backend: str = "reference") -> dict[int, torch.Tensor]:
    """Run `model(input_ids)` [B, S] with its DSA attention on the absorbed sparse path of `backend`
    (never the dense masked attention, whose [H, S, S] scores do not fit at long prompts) and return
    {layer: kernel-convention indices [B*S, topk]} for every layer that runs its own indexer (hooks
    always come off)."""
    captured: dict[int, torch.Tensor] = {}
    handles = []

    def hook(layer: int):
        def record(module, args, output):
            captured[layer] = kernel_indices(output).cpu()
        return record

    try:
        for attn in attention_modules(model):
            if attn.indexer is not None:
                handles.append(attn.indexer.register_forward_hook(hook(attn.layer_idx)))
        with use_backend(model, backend), torch.inference_mode():
            model(input_ids, logits_to_keep=1, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return captured


def write_trace(path: str | os.PathLike, layers: dict[int, torch.Tensor], metadata: dict) -> Path:
    """Write a trace file atomically (temporary name, then rename)."""
    path = Path(path)
    if not layers:
        raise ValueError("layers must hold at least one layer's indices")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tensors = {f"layer_{layer}": idx.to(torch.int32).contiguous() for layer, idx in layers.items()}
        save_file(tensors, str(tmp), metadata={k: json.dumps(v) for k, v in metadata.items()})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_trace(path: str | os.PathLike) -> tuple[dict[int, torch.Tensor], dict]:
    """({layer: indices [T, topk] int32}, metadata) of a trace file."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"index trace {str(path)!r} is a directory; expected a trace file (.safetensors, from "
                         f"glmcheck capture-indices)")
    if not path.is_file():
        raise FileNotFoundError(f"index trace {str(path)!r} does not exist")
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = {k: json.loads(v) for k, v in (handle.metadata() or {}).items()}
            layers = {int(name.split("_", 1)[1]): handle.get_tensor(name)
                      for name in handle.keys()  # noqa: SIM118  (a safetensors handle is not iterable)
                      if name.startswith("layer_")}
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"index trace {str(path)!r} is unreadable: {err}") from None
    if not layers:
        raise ValueError(f"index trace {str(path)!r} holds no layer_<l> tensors")
    bad = [layer for layer, idx in layers.items() if idx.dtype != torch.int32 or idx.dim() != 2]
    if bad:
        raise ValueError(f"index trace {str(path)!r}: layers {bad} are not [T, topk] int32")
    return dict(sorted(layers.items())), metadata
