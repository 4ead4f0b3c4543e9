"""Training the DSA indexer the way DSA trains it: a KL term against the main attention.

The indexer's top-k is a hard selection, so the language-model loss gives it no gradient. As in
DeepSeek-V3.2, its target for query t is the main attention's distribution summed over heads and
L1-normalised, p_t; its loss is KL(p_t || softmax(I_t)) over the causal prefix in the dense
warm-up, and over the selected set S_t only in the sparse stage. The indexer's inputs are
detached, so this loss trains the indexer alone and the LM loss trains everything else.

With GLM-5.2's shared layers a full layer's selection is also used by the shared layers after it;
its target sums the attention of every layer that uses the selection (the full layer and its
shared followers), so the indexer learns what all its consumers attend to.

`IndexerProbe` hooks a `GlmMoeDsaForCausalLM` built with eager attention (the only transformers
path that returns attention probabilities): per forward it keeps each full layer's indexer
inputs and top-k, and each selection group's summed attention (detached, fp32 [B, T, T]).
`dense_selection(model)` makes every indexer select its whole causal prefix (the dense mode).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from glmcheck.model.indexer_scores import index_scores
from glmcheck.training.hooks import HookSet

DENSE_TOPK = 1 << 30


@dataclass
class _Group:
    """One full layer's selection and what its consumers attended to in the last forward."""

    full_layer: int
    consumers: list[int]
    inputs: tuple | None = None
    topk: torch.Tensor | None = None
    target: torch.Tensor | None = None  # fp32 [B, T, T], summed over heads and consumer layers
    seen: set = field(default_factory=set)


def _layers(model):
    return model.model.layers


class IndexerProbe(HookSet):
    """Hooks that capture what the indexer loss and recall need (see the module docstring)."""

    def __init__(self, model: torch.nn.Module):
        if model.config._attn_implementation != "eager":
            raise ValueError("IndexerProbe needs eager attention (attention probabilities), got "
                             f"{model.config._attn_implementation!r}")
        super().__init__()
        self.model, self.groups = model, []
        owner: dict[int, _Group] = {}
        for index, layer in enumerate(_layers(model)):
            if layer.self_attn.indexer is not None:
                self.groups.append(_Group(index, [index]))
                indexer = layer.self_attn.indexer
                self.handles.append(indexer.register_forward_pre_hook(self._indexer_inputs(self.groups[-1]),
                                                                      with_kwargs=True))
                self.handles.append(indexer.register_forward_hook(self._indexer_topk(self.groups[-1])))
            elif self.groups:
                self.groups[-1].consumers.append(index)
            else:
                raise ValueError(f"layer {index} is a shared indexer layer with no full layer before it")
            owner[index] = self.groups[-1]
            self.handles.append(layer.self_attn.register_forward_hook(self._attention(owner[index], index)))

    def clear(self) -> None:
        for group in self.groups:
            group.inputs = group.topk = group.target = None
            group.seen = set()

    def _indexer_inputs(self, group: _Group):
        def hook(module, args, kwargs):
            if not self.active:
                return
            hidden, q_resid, position_embeddings = args[:3]
            group.inputs = (hidden.detach(), q_resid.detach(), tuple(p.detach() for p in position_embeddings))
        return hook

    def _indexer_topk(self, group: _Group):
        def hook(module, args, output):
            if self.active:
                group.topk = output.detach()
        return hook

    def _attention(self, group: _Group, index: int):
        def hook(module, args, output):
            if not self.active:
                return
            weights = output[1]
            if weights is None:
                raise RuntimeError(f"layer {index} returned no attention weights (eager attention needed)")
            summed = weights.detach().sum(dim=1, dtype=torch.float32)  # [B, T, T]
            group.target = summed if group.target is None else group.target + summed
            group.seen.add(index)
        return hook

    def _ready(self, group: _Group) -> None:
        if group.inputs is None or group.target is None or group.seen != set(group.consumers):
            raise RuntimeError(f"no complete forward captured for indexer layer {group.full_layer}")

    def loss(self, group: _Group, *, sparse: bool, stride: int = 1, offset: int = 0) -> torch.Tensor:
        """Mean over tokens of KL(p_t || softmax(I_t)) for one group (graph into its indexer only).
        `stride` > 1 takes the query rows offset, offset + stride, ...: an unbiased estimate at 1/stride
        of the [B, T, T] work (vary `offset` from step to step)."""
        self._ready(group)
        indexer = self.model.model.layers[group.full_layer].self_attn.indexer
        rows = slice(offset % stride, None, stride)
        scores = index_scores(indexer, *group.inputs, queries=rows)  # fp32 [B, Tq, T], grad into the indexer
        allowed = _allowed(group, sparse, scores.shape[-1], scores.device)[:, rows]
        target = group.target[:, rows].masked_fill(~allowed, 0.0)
        target = target / target.sum(dim=-1, keepdim=True).clamp_min(1e-30)
        log_q = torch.log_softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        log_p = torch.log(target.clamp_min(1e-30))
        kl = torch.where(target > 0, target * (log_p - log_q), 0.0).sum(dim=-1)
        return kl.mean()

    @torch.no_grad()
    def recall(self, group: _Group, topk: int) -> dict:
        """How much of the (dense) attention mass the indexer's top-`topk` holds, over tokens t >= topk
        (where the selection is a choice), beside the last-`topk`-positions window and chance.
        Meaningful after a dense-mode forward (the target is then the unrestricted attention)."""
        self._ready(group)
        indexer = self.model.model.layers[group.full_layer].self_attn.indexer
        scores = index_scores(indexer, *group.inputs)
        seq = scores.shape[-1]
        if seq <= topk:
            return {"tokens": 0}
        causal = _causal(seq, scores.device)
        target = group.target.masked_fill(~causal, 0.0)
        target = target / target.sum(dim=-1, keepdim=True).clamp_min(1e-30)
        chosen = scores.masked_fill(~causal, float("-inf")).topk(topk, dim=-1).indices
        held = target.gather(-1, chosen).sum(dim=-1)[:, topk:]  # [B, T - topk]
        positions = torch.arange(seq, device=scores.device)
        window = causal & (positions[None, :] > positions[:, None] - topk)
        recent = (target * window).sum(dim=-1)[:, topk:]
        chance = (topk / (positions[topk:].double() + 1)).mean().item()
        return {"tokens": int(held.numel()), "indexer": held.mean().item(), "recent_window": recent.mean().item(),
                "chance": chance}


def _causal(seq: int, device) -> torch.Tensor:
    return torch.ones(seq, seq, dtype=torch.bool, device=device).tril()


def _allowed(group: _Group, sparse: bool, seq: int, device) -> torch.Tensor:
    """bool [B or 1, T, T]: the causal prefix (dense) or the selection within it (sparse)."""
    causal = _causal(seq, device)
    if not sparse:
        return causal[None]
    chosen = torch.zeros(group.topk.shape[0], seq, seq, dtype=torch.bool, device=device)
    chosen.scatter_(-1, group.topk.long(), True)
    return chosen & causal[None]


@contextlib.contextmanager
def dense_selection(model: torch.nn.Module):
    """Every indexer selects its whole causal prefix while inside (the dense warm-up mode)."""
    saved = []
    for layer in _layers(model):
        indexer = layer.self_attn.indexer
        if indexer is not None:
            saved.append((indexer, indexer.index_topk))
            indexer.index_topk = DENSE_TOPK
    try:
        yield
    finally:
        for indexer, value in saved:
            indexer.index_topk = value
