"""Measure the layer-0 attention logit spread of the dummy init scales (hf vs sharp).

Usage: python scripts/measure_logit_std.py [--preset tiny] [--tokens 256] [--device cpu]
Prints the std of q_abs . kv * scale over the selected rows of each token, and the mean
entropy of the resulting attention (in nats; uniform over n rows is ln n).
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

from glmcheck.model import build_dummy_model, make_config, use_backend


def measure(preset: str, init: str, tokens: int, device: str) -> tuple[float, float, float]:
    model = build_dummy_model(make_config(preset, layers=1), seed=0, init=init, device=device)
    prompt = torch.randint(0, model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))
    seen = {}
    with use_backend(model, "reference") as session, torch.no_grad():
        real = session.backend.fn

        def spy(q, kv, idx, scale, d_v, *, topk_length=None):
            seen.update(q=q, kv=kv, idx=idx, scale=scale)
            return real(q, kv, idx, scale, d_v, topk_length=topk_length)

        session.backend.fn = spy
        model(prompt.to(device), logits_to_keep=1)
    q, kv, idx = seen["q"].float(), seen["kv"].float(), seen["idx"].long()
    logits = torch.einsum("thd,sd->ths", q, kv) * seen["scale"]
    valid = (idx >= 0)
    picked = torch.gather(logits, 2, idx.clamp_min(0).unsqueeze(1).expand(-1, q.shape[1], -1))
    picked = picked.masked_fill(~valid.unsqueeze(1), float("nan"))
    std = torch.nanmean((picked - torch.nanmean(picked, dim=-1, keepdim=True)) ** 2).sqrt().item()
    probs = torch.softmax(picked.nan_to_num(float("-inf")), dim=-1)
    entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1).mean().item()
    uniform = valid.sum(-1).float().clamp_min(1).log().mean().item()
    return std, entropy, uniform


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    ns = parser.parse_args()
    print(f"{ns.preset}, {ns.tokens} tokens, layer 0:")
    for init in ("hf", "sharp"):
        std, entropy, uniform = measure(ns.preset, init, ns.tokens, ns.device)
        print(f"  {init:5s} logit std {std:.3f}  attention entropy {entropy:.2f} nats "
              f"(uniform over the selected rows: {uniform:.2f}; e^H = {math.exp(entropy):.1f} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
