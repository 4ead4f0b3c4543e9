"""Comparison metrics in float64, computed where the tensors are (the GPU when there is one).

`pair_statistics(actual, expected, ...)` gives every statistic of one comparison at once: both tensors are read
as fp64 once, their difference formed once, and the scalars reach the host in one transfer. NaN/Inf is
detected once per tensor (`FiniteCache` remembers it across the comparisons of a check, where the exact
reference is compared with every row); a non-finite pair makes every statistic NaN, so a NaN can never produce a
passing metric. The single functions (`cosine`, `rel_l2`, ...) are views of it. Each statistic is the same torch
reduction over the same fp64 values as the one-statistic-at-a-time oracle tests/support/metrics_before.py, so on
one device the numbers are the same bits; on a GPU they differ from a CPU's in the last bits of the reductions.
"""

from __future__ import annotations

import math

import torch

from glmcheck.process.phases import CLOCK

BASIC = ("cosine", "rel_l2", "max_abs")
PER_TOKEN = ("token_max_rel_l2", "scale_bias", "scale_bias_se")
DIRECTION = ("temperature_bias", "temperature_bias_se")
# The temperature direction's finite difference: the exact output at softmax scale x (1 + TEMPER_STEP), less the exact
# output, over TEMPER_STEP (fp32: ~1e-4 relative error in it; `glmcheck.checks.layer0`).
TEMPER_STEP = 1e-3


class FiniteCache:
    """Whether each tensor a check compares is finite, computed once per tensor (it holds a reference to each, so
    an id is never reused while it is cached). `clear()` after the check."""

    def __init__(self):
        self._seen: dict[int, tuple[torch.Tensor, bool]] = {}

    def finite(self, tensor: torch.Tensor) -> bool:
        hit = self._seen.get(id(tensor))
        if hit is None or hit[0] is not tensor:
            hit = (tensor, bool(torch.isfinite(tensor).all()))
            self._seen[id(tensor)] = hit
        return hit[1]

    def clear(self) -> None:
        self._seen.clear()


def _check_shapes(actual: torch.Tensor, expected: torch.Tensor) -> None:
    if actual.shape != expected.shape:
        raise ValueError(f"actual and expected must have the same shape, got "
                         f"{tuple(actual.shape)} and {tuple(expected.shape)}")


def pair_statistics(actual: torch.Tensor, expected: torch.Tensor, *, per_token: bool = False,
                    direction: torch.Tensor | None = None, finite: FiniteCache | None = None) -> dict[str, float]:
    """The statistics of `actual` against `expected` (same shape, any dtype, on expected's device):

    - `cosine` of the flattened tensors (1 when both are zero, 0 when one is);
    - `rel_l2` = ||actual - expected|| / ||expected|| (0 when both are zero, inf when only expected is);
    - `max_abs`, the largest elementwise |difference|;
    - with `per_token` (dim 0 indexes tokens): `token_max_rel_l2`, the largest rel-L2 of one token (a zero
      expected token counts 0, or inf when its actual is not zero), and `scale_bias` = <d, e> / <e, e> (d =
      actual - expected: the least-squares scale of actual on expected, minus 1) with its standard error
      `scale_bias_se` = ||d e|| / <e, e> (elementwise differences taken as independent);
    - with `direction` u (same shape): `temperature_bias` = <d, u> / <u, u> and `temperature_bias_se` =
      ||d u|| / <u, u> (0, 0 when u is zero).
    Every value is NaN when actual or expected is not finite, the direction's two when it is not (`finite` caches
    that per tensor)."""
    with CLOCK.phase("compare"):
        return _statistics(actual, expected, per_token, direction, finite or FiniteCache())


def _statistics(actual: torch.Tensor, expected: torch.Tensor, per_token: bool, direction: torch.Tensor | None,
                cache: FiniteCache) -> dict[str, float]:
    _check_shapes(actual, expected)
    if direction is not None:
        _check_shapes(direction, expected)
    names = BASIC + (PER_TOKEN if per_token else ())
    if not (cache.finite(actual) and cache.finite(expected)):
        return dict.fromkeys(names + (DIRECTION if direction is not None else ()), math.nan)
    if direction is not None and not cache.finite(direction):
        return _statistics(actual, expected, per_token, None, cache) | dict.fromkeys(DIRECTION, math.nan)
    device = expected.device
    e = expected.detach().to(device, torch.float64).flatten()
    a = actual.detach().to(device, torch.float64).flatten()
    d = a - e
    empty = a.numel() == 0
    sums = [a.norm(), e.norm(), a @ e, d.norm(), d.new_zeros(()) if empty else d.abs().max()]
    if per_token:
        tokens = actual.shape[0]
        if tokens == 0 or empty:
            token_max = d.new_zeros(())
        else:
            diff, ref = d.view(tokens, -1).norm(dim=1), e.view(tokens, -1).norm(dim=1)
            token_max = torch.where(ref > 0, diff / ref.clamp_min(1e-300), torch.where(diff > 0, math.inf, 0.0)).max()
        de = d * e
        sums += [token_max, (e * e).sum(), de.sum(), de.norm()]
    if direction is not None:
        u = direction.detach().to(device, torch.float64).flatten()
        du = d * u
        sums += [(u * u).sum(), du.sum(), du.norm()]
    values = torch.stack(sums).tolist()  # one transfer to the host
    na, ne, dot, diff_norm, largest = values[:5]
    out = {"cosine": 1.0 if na == 0.0 and ne == 0.0 else 0.0 if na == 0.0 or ne == 0.0 else dot / (na * ne),
           "rel_l2": (0.0 if diff_norm == 0.0 else math.inf) if ne == 0.0 else diff_norm / ne,
           "max_abs": largest}
    rest = values[5:]
    if per_token:
        token_max, energy, along, spread = rest[:4]
        rest = rest[4:]
        out["token_max_rel_l2"] = token_max
        out["scale_bias"], out["scale_bias_se"] = (0.0, 0.0) if energy == 0.0 else (along / energy, spread / energy)
    if direction is not None:
        energy, along, spread = rest
        out["temperature_bias"], out["temperature_bias_se"] = (0.0, 0.0) if energy == 0.0 else \
            (along / energy, spread / energy)
    return out


def cosine(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Cosine similarity of the flattened tensors; 1.0 when both are all zero, NaN if non-finite."""
    return pair_statistics(actual, expected)["cosine"]


def rel_l2(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """||actual - expected|| / ||expected||; 0 when both are zero, inf when only expected is."""
    return pair_statistics(actual, expected)["rel_l2"]


def max_abs(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Largest absolute elementwise difference; NaN if either tensor is non-finite."""
    return pair_statistics(actual, expected)["max_abs"]


def token_max_rel_l2(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """The largest rel-L2 of one token (dim 0 indexes tokens); see `pair_statistics`."""
    return pair_statistics(actual, expected, per_token=True)["token_max_rel_l2"]


def scale_bias(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    """(b, se) of the least-squares scale of actual on expected, minus 1; see `pair_statistics`."""
    stats = pair_statistics(actual, expected, per_token=True)
    return stats["scale_bias"], stats["scale_bias_se"]


def direction_bias(actual: torch.Tensor, expected: torch.Tensor, direction: torch.Tensor) -> tuple[float, float]:
    """(b, se): the least-squares coefficient of actual - expected on `direction` and its standard error; with the
    derivative of the output in the softmax scale's relative change, b estimates a relative error of that scale;
    see `pair_statistics`."""
    stats = pair_statistics(actual, expected, direction=direction)
    return stats["temperature_bias"], stats["temperature_bias_se"]
