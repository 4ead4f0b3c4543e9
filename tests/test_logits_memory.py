"""The logits check holds one forward's logits beside the reference's, however many band variants and backends it
runs: what it keeps of each forward (the last position, the record's tensors) is a copy, never a view of the whole
[1, T, vocab] logits (on an H100, glm-5.2 at 8192 tokens grew 2.4 GiB a forward before)."""

from __future__ import annotations

import gc
import weakref

import torch

from glmcheck.checks import logits as logits_check
from glmcheck.checks.runner import forward_under
from glmcheck.model import build_dummy_model, make_config


def test_logits_check_keeps_no_earlier_forward_alive(monkeypatch):
    model = build_dummy_model(make_config("tiny"), seed=3, init="sharp")
    prompt = torch.randint(0, 512, (1, 32), generator=torch.Generator().manual_seed(5))
    produced: list[weakref.ref] = []
    alive_before: list[int] = []

    def watched(*args, **kwargs):
        gc.collect()
        alive_before.append(sum(ref() is not None for ref in produced))
        run = forward_under(*args, **kwargs)
        produced.append(weakref.ref(run.captured.logits))
        return run

    monkeypatch.setattr(logits_check, "forward_under", watched)
    result = logits_check.run_logits(model, [prompt], ["reference", "torch_bf16"], band_size=3)
    # reference, its rerun, 3 band variants, torch_bf16: every forward after the first starts with the reference's
    # logits alone alive
    assert len(alive_before) == 6 and alive_before == [0] + [1] * 5, alive_before
    gc.collect()
    assert all(ref() is None for ref in produced), "the check's result keeps a forward's whole logits alive"
    assert result.tensors and all(t.dim() == 1 for t in result.tensors.values())
