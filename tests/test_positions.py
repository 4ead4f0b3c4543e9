"""Every position of one forward (glmcheck.checks.positions, position_gate, position_sweep): the per-position
statistics against a direct fp64 computation, their summary, the gate on synthetic bands, the sweep's bins."""

from __future__ import annotations

import math

import pytest
import torch

from glmcheck.checks import positions
from glmcheck.checks.position_gate import PositionBand, PositionGate
from glmcheck.checks.position_sweep import length_bins, run_position_sweep
from glmcheck.checks.positions import (
    PositionStatistics,
    block_bootstrap_interval,
    mean_above,
    position_statistics,
    summarize,
)
from glmcheck.checks.sweep import Faulted


def _direct(row: torch.Tensor, ref: torch.Tensor):
    """Per position, one at a time, in fp64 on the host: KL, same top, |dlogprob| of the reference's top token."""
    kl, same, d = [], [], []
    for r, x in zip(row.double(), ref.double()):
        p, q = torch.log_softmax(x, -1), torch.log_softmax(r, -1)
        kl.append(float((p.exp() * (p - q)).sum()))
        top = int(x.argmax())
        same.append(int(r.argmax()) == top)
        d.append(abs(float(q[top] - p[top])))
    return torch.tensor(kl, dtype=torch.float64), torch.tensor(same), torch.tensor(d, dtype=torch.float64)


@pytest.mark.parametrize("chunk", [1 << 24, 7 * 50])  # whole, and chunks of 7 positions of a 50-token vocab
def test_position_statistics_match_a_direct_computation(monkeypatch, chunk):
    monkeypatch.setattr(positions, "CHUNK_ELEMENTS", chunk)
    g = torch.Generator().manual_seed(3)
    ref = (torch.randn(1, 40, 50, generator=g) * 3).bfloat16()
    row = (ref.float() + torch.randn(1, 40, 50, generator=g) * 0.05).bfloat16()
    row[0, 5] = ref[0, 5]
    stats = position_statistics(row, ref)
    kl, same, d = _direct(row[0], ref[0])
    assert torch.allclose(stats.distance, kl, rtol=1e-10, atol=1e-14) and torch.equal(stats.same_top, same)
    assert torch.allclose(stats.dlogprob, d, rtol=1e-10, atol=1e-14)
    assert float(stats.distance[5]) == 0.0 and len(stats) == 40 and stats.distance.dtype == torch.float64


def test_a_non_finite_logit_is_nan_at_its_position_and_fails():
    ref = torch.randn(6, 9, dtype=torch.float64)
    row = ref.clone()
    row[2, 4] = math.nan
    row[4, 1] = math.inf
    stats = position_statistics(row, ref)
    assert torch.isnan(stats.distance[[2, 4]]).all() and torch.isfinite(stats.distance[[0, 1, 3, 5]]).all()
    assert not bool(stats.same_top[2]) and math.isnan(summarize(stats)["mean_kl"])
    band = PositionBand.of([position_statistics(ref + 0.01 * k, ref) for k in (1, 2, 3)], ["a", "b", "c"])
    verdict, why, _ = PositionGate().judge(stats, band)
    assert verdict == "FAIL" and "non-finite" in why
    with pytest.raises(ValueError, match="same shape"):
        position_statistics(row[:, :3], ref)


def test_summary_and_its_interval():
    g = torch.Generator().manual_seed(1)
    kl = torch.rand(500, generator=g, dtype=torch.float64) ** 4
    stats = PositionStatistics(kl, torch.ones(500, dtype=torch.bool), kl.sqrt())
    s = summarize(stats)
    assert s["mean_kl_low"] < s["mean_kl"] < s["mean_kl_high"] and s["kl_max"] == float(kl.max())
    assert s["kl_p50"] <= s["kl_p99"] <= s["kl_p999"] <= s["kl_max"] and s["same_top"] == 1.0
    assert s["tail_kl"] == pytest.approx(float(torch.topk(kl, 5).values.mean()))
    assert block_bootstrap_interval(kl) == block_bootstrap_interval(kl)  # seeded
    runs = torch.repeat_interleave(kl[:50], 10)  # runs of 10 alike: blocks see the correlation, single positions not
    blocked, single = block_bootstrap_interval(runs, block=10), block_bootstrap_interval(runs, block=1)
    assert blocked[1] - blocked[0] > 2 * (single[1] - single[0])
    assert mean_above(torch.arange(10.0), 0.2) == 8.5 and math.isnan(mean_above(torch.zeros(0), 0.1))
    assert all(math.isnan(v) for v in block_bootstrap_interval(torch.zeros(0)))


def _band(g, n=4, positions=400):
    return [PositionStatistics(torch.rand(positions, generator=g, dtype=torch.float64) * 1e-4,
                               torch.ones(positions, dtype=torch.bool), torch.zeros(positions)) for _ in range(n)]


def test_the_gate_counts_positions_beyond_the_band_and_watches_the_median():
    g = torch.Generator().manual_seed(7)
    samples = _band(g, 5)
    band = PositionBand.of(samples[:4], [f"band:{k}" for k in range(4)])
    gate = PositionGate()
    assert gate.judge(samples[4], band)[0] == "PASS"  # one more draw of the band's own kind
    few = samples[4].distance.clone()
    few[:4] *= 100  # 1 % of the positions far out: a flip's worth
    assert gate.judge(PositionStatistics(few, samples[4].same_top, few), band)[0] == "PASS"
    many = samples[4].distance.clone()
    many[::10] = 1e-2  # 10 % of the positions far out
    verdict, why, measures = gate.judge(PositionStatistics(many, samples[4].same_top, many), band)
    assert verdict == "FAIL" and "beyond" in why and measures["exceed"] == pytest.approx(0.1)
    assert measures["beyond"] == 40 and gate.allowed_beyond(400) == pytest.approx(0.012 * 400 + 2)
    assert gate.median_limit(400) == pytest.approx(1.4) and gate.median_limit(4096) == pytest.approx(1.25)
    scaled = samples[4].distance * 3  # every position a little: the median moves, few positions stand out
    verdict, why, measures = gate.judge(PositionStatistics(scaled, samples[4].same_top, scaled), band)
    assert verdict == "FAIL" and "median KL" in why and measures["margin"] > 1


def test_a_band_that_cannot_judge():
    g = torch.Generator().manual_seed(8)
    samples = _band(g, 4)
    few = PositionBand.of(samples[:2], ["band:0", "band:1"])
    verdict, why, _ = PositionGate().judge(samples[3], few)
    assert verdict == "INCONCLUSIVE" and "at least 3" in why
    zero = PositionBand.of([PositionStatistics(torch.zeros(400, dtype=torch.float64), s.same_top, s.dlogprob)
                            for s in samples[:3]], ["a", "b", "c"])
    verdict, why, _ = PositionGate().judge(samples[3], zero)
    assert verdict == "INCONCLUSIVE" and "zero width" in why


def test_sweep_bins_and_onset_from_one_set_of_positions():
    assert length_bins([32, 64, 128]) == [(32, 0, 32), (64, 32, 64), (128, 64, 128)]
    g = torch.Generator().manual_seed(9)
    samples = _band(g, 6, positions=256)
    late = samples[5].distance.clone()
    late[100:] = 1e-2  # a fault from position 100 on: prompt lengths 101 and more
    stats = {"rerun": PositionStatistics(torch.zeros(256, dtype=torch.float64), samples[0].same_top,
                                         samples[0].dlogprob),
             **{f"band:{k}": samples[k] for k in range(4)}, "ok": samples[4],
             "late": PositionStatistics(late, samples[5].same_top, late), "dead": Faulted("raised")}
    result = run_position_sweep(stats, "rerun", [f"band:{k}" for k in range(4)], ["ok", "late", "dead"],
                                [32, 64, 128, 256])
    assert result.onsets["late"]["onset"] == 128 and result.onsets["late"]["stays_out"]
    assert result.onsets["ok"]["verdict"] == "PASS" and result.onsets["dead"]["onset"] == 32
    assert result.verdict == "FAIL" and {r["positions"] for r in result.rows} == {32, 64, 128}
