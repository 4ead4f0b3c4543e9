"""The single-pass metrics (`glmcheck.checks.metrics.pair_statistics`, issue 55) give the same bits as the metrics
before it (`tests/support/metrics_before.py`: one fp64 CPU copy and one NaN check per statistic) on random pairs
of every dtype and shape a check compares, NaN, Inf and zeros included; on a GPU they run where the tensors are."""

from __future__ import annotations

import math

import pytest
import torch

from glmcheck.checks import metrics
from glmcheck.checks.metrics import FiniteCache, pair_statistics
from tests.support import metrics_before as before


def _same(new: float, old: float) -> bool:
    return (math.isnan(new) and math.isnan(old)) or new == old


def _old(actual, expected, direction):
    values = {"cosine": before.cosine(actual, expected), "rel_l2": before.rel_l2(actual, expected),
              "max_abs": before.max_abs(actual, expected),
              "token_max_rel_l2": before.token_max_rel_l2(actual, expected)}
    values["scale_bias"], values["scale_bias_se"] = before.scale_bias(actual, expected)
    values["temperature_bias"], values["temperature_bias_se"] = before.direction_bias(actual, expected, direction)
    return values


def _pairs(device: str):
    gen = torch.Generator().manual_seed(55)
    for shape in ((64, 4, 32), (7, 3, 5), (1, 1, 1), (33, 129)):
        for dtype in (torch.bfloat16, torch.float32, torch.float64):
            expected = torch.randn(shape, generator=gen, dtype=torch.float64)
            actual = expected + 1e-3 * torch.randn(shape, generator=gen, dtype=torch.float64)
            direction = torch.randn(shape, generator=gen, dtype=torch.float64)
            yield actual.to(dtype), expected.to(dtype), direction
    x = torch.randn(16, 2, 8, generator=gen)
    for bad in (math.nan, math.inf, -math.inf):
        broken = x.clone()
        broken[3, 1, 2] = bad
        yield broken, x, x.flip(0)
        yield x, broken, x
        yield x.clone(), x, broken
    zeros = torch.zeros(8, 2, 4)
    yield zeros, zeros, zeros
    yield x[:8, :, :4].clone(), zeros, zeros
    yield zeros, x[:8, :, :4].clone(), x[:8, :, :4].clone()
    partial = x.clone()
    partial[2] = 0
    yield x.clone(), partial, x  # a token whose expected is zero: token max rel-L2 inf
    yield partial.clone(), partial, x


def test_the_single_pass_gives_the_bits_of_the_metrics_before_it():
    for count, (actual, expected, direction) in enumerate(_pairs("cpu")):
        new = pair_statistics(actual, expected, per_token=True, direction=direction)
        old = _old(actual, expected, direction)
        for name, value in old.items():
            assert _same(new[name], value), (count, name, new[name], value)
        assert _same(metrics.rel_l2(actual, expected), old["rel_l2"])
        assert _same(metrics.scale_bias(actual, expected)[0], old["scale_bias"])
        assert _same(metrics.direction_bias(actual, expected, direction)[1], old["temperature_bias_se"])
    assert count > 20
    empty = torch.zeros(0, 2, 4)
    assert pair_statistics(empty, empty, per_token=True, direction=empty) == {
        "cosine": 1.0, "rel_l2": 0.0, "max_abs": 0.0, "token_max_rel_l2": 0.0, "scale_bias": 0.0,
        "scale_bias_se": 0.0, "temperature_bias": 0.0, "temperature_bias_se": 0.0}


def test_nan_is_found_once_per_tensor(monkeypatch):
    calls = []
    real = torch.isfinite
    monkeypatch.setattr(torch, "isfinite", lambda t: (calls.append(t.shape), real(t))[1])
    cache = FiniteCache()
    reference = torch.randn(8, 2, 4)
    rows = [reference + 0.01 * torch.randn(8, 2, 4) for _ in range(5)]
    for row in rows:
        pair_statistics(row, reference, per_token=True, direction=reference, finite=cache)
    assert len(calls) == 1 + len(rows), "the reference once, each row once"


def test_shapes_must_match():
    with pytest.raises(ValueError, match=r"same shape, got \(2, 3\) and \(3, 2\)"):
        pair_statistics(torch.zeros(2, 3), torch.zeros(3, 2))


@pytest.mark.gpu
def test_on_the_gpu_the_statistics_stay_there_and_agree_with_the_cpu():
    for actual, expected, direction in _pairs("cuda"):
        cpu = pair_statistics(actual, expected, per_token=True, direction=direction)
        gpu = pair_statistics(actual.cuda(), expected.cuda(), per_token=True, direction=direction.cuda())
        for name, value in cpu.items():
            assert (math.isnan(value) and math.isnan(gpu[name])) or gpu[name] == pytest.approx(value, rel=1e-12,
                                                                                              abs=1e-300), name
