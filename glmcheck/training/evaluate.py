"""Losses a training run records and a test recomputes: held-out loss and indexer recall."""

from __future__ import annotations

import math

import torch

from glmcheck.training.indexer_loss import IndexerProbe, dense_selection


@torch.no_grad()
def mean_loss(model: torch.nn.Module, windows: torch.Tensor, *, micro_batch: int = 1,
              autocast: bool = False) -> float:
    """Mean next-token cross-entropy (nats) of `model` over int64 windows [n, L + 1] (inputs [:, :-1])."""
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in range(0, windows.shape[0], micro_batch):
        chunk = windows[start:start + micro_batch].to(device)
        with _autocast(device, autocast):
            logits = model(input_ids=chunk[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), chunk[:, 1:].flatten(),
                                                 reduction="sum")
        total += loss.double().item()
        count += chunk[:, 1:].numel()
    return total / count


@torch.no_grad()
def indexer_recall(model: torch.nn.Module, windows: torch.Tensor, *, micro_batch: int = 1,
                   autocast: bool = False) -> list[dict]:
    """Per full indexer layer: the share of the dense attention mass its top-k holds (tokens past
    index_topk), beside the most recent index_topk positions and chance. Needs eager attention."""
    device = next(model.parameters()).device
    topk = model.config.index_topk
    probe = IndexerProbe(model)
    sums: dict[int, dict] = {}
    try:
        for start in range(0, windows.shape[0], micro_batch):
            chunk = windows[start:start + micro_batch].to(device)
            probe.clear()
            with dense_selection(model), _autocast(device, autocast):
                model(input_ids=chunk[:, :-1])
            for group in probe.groups:
                result = probe.recall(group, topk)
                if not result.get("tokens"):
                    continue
                acc = sums.setdefault(group.full_layer, {"tokens": 0, "indexer": 0.0, "recent_window": 0.0,
                                                         "chance": 0.0})
                for key in ("indexer", "recent_window", "chance"):
                    acc[key] += result[key] * result["tokens"]
                acc["tokens"] += result["tokens"]
    finally:
        probe.remove()
    rows = []
    for layer, acc in sorted(sums.items()):
        n = acc["tokens"]
        rows.append({"layer": layer, "tokens": n, "topk": topk,
                     **{k: acc[k] / n for k in ("indexer", "recent_window", "chance")}})
    return rows


def perplexity(loss: float) -> float:
    return math.exp(loss) if loss < 50 else math.inf


def _autocast(device: torch.device, enabled: bool):
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=enabled and device.type == "cuda")
