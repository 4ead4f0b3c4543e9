"""Power curves (glmcheck.selftest.power): each fault family alters what its size says, a size that alters nothing is
inert (neither caught nor missed), and a small run on tiny catches the large sizes and reports the curve."""

from __future__ import annotations

import math

import pytest
import torch

from glmcheck import cli
from glmcheck.selftest import power
from glmcheck.selftest.power import FAMILIES, PowerPoint, measure_power, power_table


def _recording():
    seen = {}

    def base(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        seen.update(indices=indices.clone(), sm_scale=sm_scale)
        return torch.ones(q.shape[0], q.shape[1], d_v, dtype=torch.bfloat16)
    return base, seen


def _causal(tokens=40, topk=16):
    indices = torch.full((tokens, topk), -1, dtype=torch.int32)
    for t in range(tokens):
        n = min(t + 1, topk)
        indices[t, :n] = torch.arange(t + 1 - n, t + 1, dtype=torch.int32)
    return torch.zeros(tokens, 2, 8), torch.zeros(tokens, 8), indices


def test_each_family_alters_its_share():
    q, kv, indices = _causal()
    base, seen = _recording()
    kernel = FAMILIES["slots_dropped"].make(base, 1 / 4)
    kernel(q, kv, indices, 0.5, 4)
    valid_before, valid_after = (indices >= 0).sum(dim=1), (seen["indices"] >= 0).sum(dim=1)
    steps = [sum(math.floor((i + 1) / 4 + 0.5) > math.floor(i / 4 + 0.5) for i in range(n)) for n in valid_before]
    assert (valid_before - valid_after).tolist() == steps and steps[-1] == 4 and kernel.altered == sum(steps)
    kernel = FAMILIES["wrong_rows"].make(base, 1 / 8)
    kernel(q, kv, indices, 0.5, 4)
    moved = (seen["indices"] != indices).any(dim=1).nonzero().flatten().tolist()
    assert kernel.altered == 5 and len(moved) <= 5 and all(torch.equal(seen["indices"][t], indices[t + 1])
                                                             for t in moved)
    kernel = FAMILIES["softmax_scale"].make(base, 1e-3)
    kernel(q, kv, indices, 0.5, 4)
    assert seen["sm_scale"] == pytest.approx(0.5 * 1.001)
    out = FAMILIES["output_scale"].make(base, 0.5)(q, kv, indices, 0.5, 4)
    assert float(out[0, 0, 0]) == 1.5
    kernel = FAMILIES["empty_as_row0"].make(base, 1 / 100)
    kernel(q, kv, indices, 0.5, 4)  # 15 tokens have an empty slot: 1 in 100 of them rounds to none
    assert kernel.altered == 0 and torch.equal(seen["indices"], indices)


def test_power_on_tiny_and_an_inert_size(monkeypatch):
    monkeypatch.setitem(FAMILIES, "output_scale", power.FaultFamily("output_scale", power.output_scale,
                                                                    (1e-4, 0.3), "e in x (1 + e)"))
    monkeypatch.setitem(FAMILIES, "empty_as_row0", power.FaultFamily("empty_as_row0", power.empty_as_row0,
                                                                     (1e-3, 1.0), "share"))
    points = measure_power("tiny", [0], 40, ["layer0"], ["output_scale", "empty_as_row0"], band_size=3)
    got = {(p.family, p.size): p for p in points}
    assert got[("output_scale", 0.3)].caught == got[("output_scale", 0.3)].runs == 1
    assert got[("output_scale", 1e-4)].caught == 0
    assert got[("empty_as_row0", 1e-3)].inert == 1 and got[("empty_as_row0", 1e-3)].runs == 0
    table = power_table(points)
    assert "0.001: inert" in table and "| layer0 | output_scale" in table
    with pytest.raises(ValueError, match="--checks must name some of layer0, logits"):
        measure_power("tiny", [0], 40, ["drift"])


def test_power_table_names_the_smallest_size_seen():
    points = [PowerPoint("logits", "wrong_rows", 0.01, 3, 10), PowerPoint("logits", "wrong_rows", 0.1, 9, 10),
              PowerPoint("logits", "wrong_rows", 0.5, 10, 10)]
    assert power_table(points).splitlines()[-1].rstrip(" |").endswith("0.1")


def test_power_cli_refuses_a_check_it_cannot_run(capsys):
    code = cli.main(["selftest", "--power", "--model", "tiny", "--checks", "drift", "--seeds", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "--checks must name some of layer0, logits with --power" in err
    code = cli.main(["selftest", "--power"])
    assert code == 2 and "add --model" in capsys.readouterr().err
