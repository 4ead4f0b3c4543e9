"""fp64 capture of what the checks compare, through hooks that always come off.

`capture(model, session, ...)` records, as float64 CPU tensors:
- `latent[l]`  layer l's absorbed latent output [T, H, L] (absorbed backends only);
- `value[l]`   layer l's per-head value output [T, H, V] (the o_proj input; every backend);
- `hidden[l]`  layer l's output hidden state [T, hidden] (drift);
- `indices[l]` layer l's kernel-convention indices [T, K] (int32, absorbed backends only);
- `logits`     the final logits of the last `last_logits` positions [B, K, vocab], set by
               `record_logits` from the model output.
Only what was asked for is kept.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from glmcheck.model.swap import SwapSession, attention_modules


@dataclass
class Captured:
    """Tensors captured during one forward (see module docstring)."""

    latent: dict[int, torch.Tensor] = field(default_factory=dict)
    value: dict[int, torch.Tensor] = field(default_factory=dict)
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)
    indices: dict[int, torch.Tensor] = field(default_factory=dict)
    logits: torch.Tensor | None = None

    def record_logits(self, logits: torch.Tensor, last: int = 1) -> None:
        """Keep the last `last` positions of logits [B, S, vocab] as float64 on the CPU."""
        self.logits = logits[:, -last:].detach().to("cpu", torch.float64)


def _fp64(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu", torch.float64)


@contextlib.contextmanager
def capture(model: torch.nn.Module, session: SwapSession, *, latent_layers=(), value_layers=(),
            hidden_layers=(), index_layers=()) -> Iterator[Captured]:
    """Install capture hooks for the requested layers; they are removed on exit (errors too)."""
    captured = Captured()
    attn = attention_modules(model)
    handles = []
    latent_layers, index_layers = set(latent_layers), set(index_layers)

    def listener(layer: int, what: str, tensor: torch.Tensor) -> None:
        if what == "latent_out" and layer in latent_layers:
            captured.latent[layer] = _fp64(tensor)
        elif what == "indices" and layer in index_layers:
            captured.indices[layer] = tensor.detach().cpu().clone()

    def value_hook(layer: int):
        def hook(module, args):
            x = args[0]
            captured.value[layer] = _fp64(x.reshape(-1, attn[layer].num_heads, attn[layer].v_head_dim))
        return hook

    def hidden_hook(layer: int):
        def hook(module, args, output):
            hidden = output[0] if isinstance(output, tuple) else output
            captured.hidden[layer] = _fp64(hidden.reshape(-1, hidden.shape[-1]))
        return hook

    try:
        if latent_layers or index_layers:
            session.listeners.append(listener)
        for layer in value_layers:
            handles.append(attn[layer].o_proj.register_forward_pre_hook(value_hook(layer)))
        for layer in hidden_layers:
            handles.append(model.model.layers[layer].register_forward_hook(hidden_hook(layer)))
        yield captured
    finally:
        for handle in handles:
            handle.remove()
        if listener in session.listeners:
            session.listeners.remove(listener)
