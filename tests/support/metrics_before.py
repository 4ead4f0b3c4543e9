"""The comparison metrics as they were before issue 55 (one fp64 CPU copy and one NaN check per statistic), kept
unchanged as the oracle `tests/test_metrics.py` holds the single-pass, on-device metrics to, bit for bit.

Every function takes two tensors of the same shape (any dtype/device) and returns a Python
float. Non-finite values make the result NaN, so a NaN can never produce a passing metric.
"""

from __future__ import annotations

import math

import torch


def _pair(actual: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if actual.shape != expected.shape:
        raise ValueError(f"actual and expected must have the same shape, got "
                         f"{tuple(actual.shape)} and {tuple(expected.shape)}")
    return (actual.detach().to("cpu", torch.float64).flatten(),
            expected.detach().to("cpu", torch.float64).flatten())


def _finite(*tensors: torch.Tensor) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def cosine(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Cosine similarity of the flattened tensors; 1.0 when both are all zero, NaN if non-finite."""
    a, e = _pair(actual, expected)
    if not _finite(a, e):
        return math.nan
    na, ne = a.norm().item(), e.norm().item()
    if na == 0.0 and ne == 0.0:
        return 1.0
    if na == 0.0 or ne == 0.0:
        return 0.0
    return (a @ e).item() / (na * ne)


def rel_l2(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """||actual - expected|| / ||expected||; 0 when both are zero, inf when only expected is."""
    a, e = _pair(actual, expected)
    if not _finite(a, e):
        return math.nan
    diff, ref = (a - e).norm().item(), e.norm().item()
    if ref == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / ref


def max_abs(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Largest absolute elementwise difference; NaN if either tensor is non-finite."""
    a, e = _pair(actual, expected)
    if not _finite(a, e):
        return math.nan
    return (a - e).abs().max().item() if a.numel() else 0.0


def token_max_rel_l2(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """The largest rel-L2 of one token (dim 0 indexes tokens); a token whose expected is zero
    counts 0 when actual is zero too, inf otherwise; NaN if non-finite."""
    if actual.shape != expected.shape:
        raise ValueError(f"actual and expected must have the same shape, got "
                         f"{tuple(actual.shape)} and {tuple(expected.shape)}")
    a = actual.detach().to("cpu", torch.float64).reshape(actual.shape[0], -1)
    e = expected.detach().to("cpu", torch.float64).reshape(expected.shape[0], -1)
    if not _finite(a, e):
        return math.nan
    if a.shape[0] == 0:
        return 0.0
    diff, ref = (a - e).norm(dim=1), e.norm(dim=1)
    ratio = torch.where(ref > 0, diff / ref.clamp_min(1e-300), torch.where(diff > 0, math.inf, 0.0))
    return ratio.max().item()


def scale_bias(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    """(b, se): b = <actual - expected, expected> / <expected, expected>, the least-squares scale
    of actual on expected minus 1, and its standard error sqrt(sum (d e)^2) / sum e^2 taking the
    elementwise differences d as independent. (0, 0) when expected is zero; NaN if non-finite."""
    return direction_bias(actual, expected, expected)


def direction_bias(actual: torch.Tensor, expected: torch.Tensor, direction: torch.Tensor) -> tuple[float, float]:
    """(b, se): b = <actual - expected, u> / <u, u>, the least-squares coefficient of the difference
    on the direction u (all three of one shape), and its standard error sqrt(sum (d u)^2) / sum u^2
    taking the elementwise differences d as independent. With u = expected it is `scale_bias`; with u
    the derivative of the output in the softmax scale's relative change, b estimates a relative error
    of that scale. (0, 0) when u is zero; NaN if non-finite."""
    a, e = _pair(actual, expected)
    u = _pair(direction, expected)[0]
    if not _finite(a, e, u):
        return math.nan, math.nan
    energy = (u * u).sum().item()
    if energy == 0.0:
        return 0.0, 0.0
    d = a - e
    return (d * u).sum().item() / energy, (d * u).norm().item() / energy
