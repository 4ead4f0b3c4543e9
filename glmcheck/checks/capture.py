"""Capture of what the checks compare, through hooks that always come off.

`capture(model, session, ...)` records copies that stay where the model runs, in the dtype it produced them
(the comparisons read them as fp64 there, `glmcheck.checks.metrics`, exactly as an fp64 host copy would hold
them; `--save-tensors` takes them to the host when the record is written):
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
        """Keep a copy of the last `last` positions of logits [B, S, vocab] (their device and dtype)."""
        self.logits = _kept(logits[:, -last:])


def _kept(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of `tensor` on its device, in its dtype (the model may reuse the memory of what it hands a hook)."""
    return tensor.detach().clone()


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
            captured.latent[layer] = _kept(tensor)
        elif what == "indices" and layer in index_layers:
            captured.indices[layer] = tensor.detach().cpu().clone()

    def value_hook(layer: int):
        def hook(module, args):
            x = args[0]
            captured.value[layer] = _kept(x.reshape(-1, attn[layer].num_heads, attn[layer].v_head_dim))
        return hook

    def hidden_hook(layer: int):
        def hook(module, args, output):
            hidden = output[0] if isinstance(output, tuple) else output
            captured.hidden[layer] = _kept(hidden.reshape(-1, hidden.shape[-1]))
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
