"""The exact McNemar test of a paired table and its power: how large a drop n questions can detect, and how
many questions a drop needs. Counts and fractions as in `glmcheck.tasks.paired_table`.

Statistics (formulas; m = b + c, the discordant pairs):

* exact McNemar test (`mcnemar_exact`): given m, under "equal accuracy" b ~ Binomial(m, 1/2). One-sided
  (the candidate is worse): p = P(B >= b). Two-sided: p = min(1, 2 min(P(B <= b), P(B >= b))), which for
  p0 = 1/2 is the same as scipy's `binomtest` (sum of the outcomes no likelier than b). m = 0 gives p = 1.
* power (`mcnemar_power`, `detectable_drop`): questions independent; a true drop `drop` and a discordance q
  put the cells b, c at probabilities (q' + drop) / 2 and (q' - drop) / 2 with q' = max(q, drop): a drop
  of `drop` makes at least that fraction of questions disagree, so a drop beyond q is evaluated at the smallest
  discordance it needs (every disagreement a loss). Exactly, M = b + c ~ Binomial(n, q') and within it
  B ~ Binomial(M, (q' + drop) / (2 q')); the one-sided test at level alpha rejects when P(B >= b | m, 1/2)
  < alpha, i.e. b >= k(m), the smallest such count; power = sum_m P(M = m) P(B >= k(m) | m). The power rises
  with the drop, so the smallest drop with power >= the target is found by bisection over (0, q]; when even
  drop = q falls short, beyond q the power is P(Binomial(n, drop) >= m0) (m0 = the fewest discordant pairs, all
  one way, that can reject: 2^-m0 < alpha), inverted in closed form as the `power` quantile of
  Beta(m0, n - m0 + 1). Below m0 questions no drop is detectable: inf. (Searching (0, q] alone would make
  identical answers never PASS: with 0 of n disagreeing the bound below is ~3/n, ~3 expected discordant pairs,
  and P(M >= 5) stays ~0.18 at every n.)
* the discordance for power (`discordance_bound`): not the observed b + c (often 0 for near-identical
  kernels, which would make any n look sufficient) but its one-sided Clopper-Pearson upper bound at
  `discordance_level` (0.95): the q with P(Binomial(n, q) <= b + c) = 1 - level, i.e. the level quantile of
  Beta(b + c + 1, n - b - c); 1 when b + c = n. With a control run, the larger of the candidate's and the
  control's bounds.

Pure numpy/scipy; no torch.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import beta as _beta
from scipy.stats import binom as _binom

NEEDED_CAP = 10_000_000  # needed_questions searches no further (a benchmark of ten million questions is no plan)
_BISECT_TOL = 1e-10  # detectable_drop's bisection stops within this many (fractions) of the drop


# ------------------------------------------------------------------------------------------------ McNemar


def _p_drop(only_ref: np.ndarray | int, discordant: np.ndarray | int) -> np.ndarray:
    """One-sided exact p: P(B >= only_ref), B ~ Binomial(discordant, 1/2) (1 when only_ref <= 0). The one
    function behind both `mcnemar_exact` and the critical counts of `mcnemar_power`, so the two agree."""
    return _binom.sf(np.asarray(only_ref) - 1, discordant, 0.5)


def _counts(value: object, name: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name} must be a count of questions (integer >= 0), got {value!r}")
    if np.any(~np.isfinite(arr)) or np.any(arr < 0) or np.any(arr != np.round(arr)):
        raise ValueError(f"{name} must be a count of questions (integer >= 0), got {value!r}")
    return arr.astype(np.int64)


def mcnemar_exact(only_ref: int | np.ndarray, only_cand: int | np.ndarray
                  ) -> tuple[float, float] | tuple[np.ndarray, np.ndarray]:
    """Exact (conditional binomial) McNemar test of equal accuracy on the discordant pairs.

    `only_ref`: questions only the reference got right (b); `only_cand`: only the candidate (c); integers >= 0
    (numpy arrays of them work elementwise). Given m = b + c, b ~ Binomial(m, 1/2) under equal accuracy.
    Returns (p_two_sided, p_one_sided_drop): two-sided min(1, 2 min(P(B <= b), P(B >= b))) (= scipy's
    binomtest for p0 = 1/2) and one-sided P(B >= b), small when the candidate is worse. m = 0 gives (1, 1).
    Floats for scalar input, arrays for array input. ValueError for a negative or non-integer count."""
    b = _counts(only_ref, "only_ref")
    c = _counts(only_cand, "only_cand")
    m = b + c
    lower = _binom.cdf(b, m, 0.5)
    upper = _p_drop(b, m)
    two = np.minimum(1.0, 2.0 * np.minimum(lower, upper))
    if two.ndim == 0:
        return float(two), float(upper)
    return two, upper


def fail_rule(p_one_sided_drop: float | np.ndarray, drop: float | np.ndarray, alpha: float = 0.05,
              max_drop: float = 0.01) -> np.ndarray:
    """The FAIL half of the verdict: the candidate is significantly worse (one-sided McNemar p < alpha) and its
    observed drop (reference - candidate accuracy, a fraction) exceeds max_drop. Elementwise on arrays."""
    return (np.asarray(p_one_sided_drop) < alpha) & (np.asarray(drop) > max_drop)


# ------------------------------------------------------------------------------------------------ power


def check_prob(value: object, name: str, *, low_open: bool = True, high_open: bool = True) -> float:
    """`value` as a float in (0, 1) (either end closed when asked); ValueError naming `name` otherwise."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    ok = ok and math.isfinite(value)
    if ok:
        v = float(value)
        ok = (v > 0 if low_open else v >= 0) and (v < 1 if high_open else v <= 1)
    if not ok:
        interval = ("(" if low_open else "[") + "0, 1" + (")" if high_open else "]")
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}")
    return float(value)


def _check_n(n: object, name: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{name} must be an integer >= 1 (questions), got {n!r}")
    return int(n)


def check_alpha_power(alpha: float, power: float) -> tuple[float, float]:
    """(alpha, power) as floats, 0 < alpha < power < 1; ValueError otherwise."""
    alpha = check_prob(alpha, "alpha")
    power = check_prob(power, "power")
    if power <= alpha:
        raise ValueError(f"power must exceed alpha (a test rejects with probability <= alpha at no drop), "
                         f"got power={power!r}, alpha={alpha!r}")
    return alpha, power


def discordance_bound(discordant: float, n: int, level: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of the discordance rate (a fraction) given `discordant` of `n`
    questions disagreeing: the q with P(Binomial(n, q) <= discordant) = 1 - level, i.e. the `level` quantile of
    Beta(discordant + 1, n - discordant); 1 when discordant >= n. `discordant` may be fractional (a projected
    count, as `needed_questions` uses). 0 discordant gives 1 - (1 - level)^(1/n), about 3/n at level 0.95."""
    n = _check_n(n)
    level = check_prob(level, "level")
    if not (isinstance(discordant, (int, float, np.integer, np.floating)) and 0 <= discordant <= n):
        raise ValueError(f"discordant must be a count in [0, n={n}], got {discordant!r}")
    if discordant >= n:
        return 1.0
    return float(_beta.ppf(level, discordant + 1, n - discordant))


def _critical(m: np.ndarray, alpha: float) -> np.ndarray:
    """Smallest only_ref count k(m) with one-sided p = P(B >= k | m, 1/2) < alpha (m + 1, never reached, when
    no count of m rejects)."""
    k = np.clip(np.asarray(_binom.isf(alpha, m, 0.5), dtype=np.int64) + 1, 0, m + 1)
    for _ in range(64):  # isf is a float estimate: settle on the exact boundary with the test's own p
        down = (k > 0) & (_p_drop(k - 1, m) < alpha)
        up = (k <= m) & (_p_drop(k, m) >= alpha)
        if not (down.any() or up.any()):
            return k
        k = k - down + up
    raise RuntimeError("critical counts did not settle")  # pragma: no cover


def _min_rejecting(alpha: float) -> int:
    """m0: the fewest discordant pairs that can reject one-sided at alpha (all of them one way: 2^-m0 < alpha)."""
    m0 = max(1, math.floor(-math.log2(alpha)))
    while m0 > 1 and _p_drop(m0 - 1, m0 - 1) < alpha:
        m0 -= 1
    while not _p_drop(m0, m0) < alpha:
        m0 += 1
    return m0


class _Power:
    """The exact power at fixed n, q and alpha for drops in (0, q], precomputed over the plausible M."""

    def __init__(self, n: int, q: float, alpha: float):
        self.q = q
        lo = int(_binom.ppf(1e-15, n, q))
        hi = int(_binom.isf(1e-15, n, q))
        self.m = np.arange(max(0, lo - 1), min(n, hi + 1) + 1)
        self.weight = _binom.pmf(self.m, n, q)
        self.k = _critical(self.m, alpha)

    def __call__(self, drop: float) -> float:
        pi = min(1.0, (self.q + drop) / (2 * self.q))
        return float(np.dot(self.weight, _binom.sf(self.k - 1, self.m, pi)))


def mcnemar_power(n: int, drop: float, discordance: float, alpha: float = 0.05) -> float:
    """Exact probability that the one-sided exact McNemar test at level alpha (p < alpha) rejects over n
    independent questions with a true drop `drop` (reference - candidate accuracy, a fraction in [0, 1]) and
    discordance `discordance` (fraction of questions disagreeing, [0, 1]). The cells b, c have probabilities
    (q' + drop) / 2 and (q' - drop) / 2 with q' = max(discordance, drop) (a drop needs at least that much
    disagreement); the power is the sum over M = m ~ Binomial(n, q') of P(B >= k(m)), B ~ Binomial(m,
    (q' + drop) / (2 q')), k(m) the test's critical count. At drop 0 it is the test's size (<= alpha)."""
    n = _check_n(n)
    drop = check_prob(drop, "drop", low_open=False, high_open=False)
    q = check_prob(discordance, "discordance", low_open=False, high_open=False)
    alpha = check_prob(alpha, "alpha")
    q = max(q, drop)
    if q == 0:
        return 0.0
    return _Power(n, q, alpha)(drop)


def detectable_drop(n: int, discordance: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true drop (reference - candidate accuracy, a fraction) that the one-sided exact McNemar test
    at level alpha detects with probability >= power over n paired questions disagreeing at rate
    `discordance` (a fraction; pass a conservative one, see `discordance_bound`), by `mcnemar_power`.

    Found by bisection over (0, discordance] to within 1e-10 (the returned drop has power >= the target); when
    even drop = discordance falls short, the answer lies beyond the discordance, where every disagreement is a
    loss and the power P(Binomial(n, drop) >= m0) inverts in closed form (Beta quantile). Returns math.inf when
    no drop at all is detectable: n below m0, the fewest discordant pairs that can reach p < alpha (5 at
    alpha = 0.05). Requires 0 < alpha < power < 1."""
    n = _check_n(n)
    q = check_prob(discordance, "discordance", low_open=False, high_open=False)
    alpha, power = check_alpha_power(alpha, power)
    m0 = _min_rejecting(alpha)
    if n < m0:
        return math.inf
    if q > 0:
        at = _Power(n, q, alpha)
        if at(q) >= power:
            lo, hi = 0.0, q
            while hi - lo > _BISECT_TOL:
                mid = 0.5 * (lo + hi)
                if at(mid) >= power:
                    hi = mid
                else:
                    lo = mid
            return hi
    # beyond q: power(drop) = P(Binomial(n, drop) >= m0) = I_drop(m0, n - m0 + 1), the Beta(m0, n - m0 + 1) cdf
    drop = max(q, float(_beta.ppf(power, m0, n - m0 + 1)))
    for _ in range(100):  # the quantile is a float: step up the last ulps until the power reaches the target
        if drop >= 1.0 or mcnemar_power(n, drop, q, alpha) >= power:
            break
        drop = min(1.0, drop + max(drop * 1e-13, 1e-16))
    return drop


def passes(n: int, max_drop: float, q: float, alpha: float, power: float) -> bool:
    """detectable_drop(n, q) <= max_drop, exactly: the power at max_drop reaches the target (it rises with the
    drop)."""
    return mcnemar_power(n, max_drop, q, alpha) >= power


def needed_questions(max_drop: float, discordance: float, alpha: float = 0.05, power: float = 0.8, *,
                     bound_level: float | None = None, n_min: int = 1, cap: int = NEEDED_CAP) -> int:
    """The smallest number of paired questions n >= n_min at which detectable_drop(n, q(n), alpha, power) <=
    max_drop, i.e. a true drop of max_drop (a fraction, in (0, 1]) is detected with probability >= power.

    q(n) is `discordance` (a fraction, fixed) or, with `bound_level`, `discordance_bound(discordance * n, n,
    bound_level)`: `discordance` is then the observed disagreement rate, assumed to persist, and the bound
    recomputed at each n (what `paired_verdict` would use there). Search: doubling from n_min, then bisection
    between the last n that fell short and the first that sufficed; the exact test's power saw-tooths slightly
    in n, so the answer is the first n that suffices on that path (it always suffices). ValueError when max_drop
    <= 0 (no drop of 0 is detectable) or no n <= cap suffices (the message says how far it got)."""
    if not (isinstance(max_drop, (int, float, np.integer, np.floating)) and not isinstance(max_drop, bool)
            and 0 < max_drop <= 1):
        raise ValueError(f"max_drop must be a drop in (0, 1] (a fraction of questions); no drop of 0 is "
                         f"detectable at any n; got {max_drop!r}")
    rate = check_prob(discordance, "discordance", low_open=False, high_open=False)
    alpha, power = check_alpha_power(alpha, power)
    n_min = _check_n(n_min, "n_min")
    cap = _check_n(cap, "cap")
    if bound_level is not None:
        bound_level = check_prob(bound_level, "bound_level")

    if n_min > cap:
        raise ValueError(f"n_min must be <= cap, got n_min={n_min}, cap={cap}")

    def q_at(n: int) -> float:
        return rate if bound_level is None else discordance_bound(rate * n, n, bound_level)

    def ok(n: int) -> bool:
        return passes(n, float(max_drop), q_at(n), alpha, power)

    lo = max(n_min, _min_rejecting(alpha)) - 1  # below m0 nothing is detectable
    hi = lo + 1
    while not ok(hi):
        if hi >= cap:
            shown = f"discordance {rate:.4g}" + (f" (observed, bounded at {bound_level})" if bound_level else "")
            at_cap = detectable_drop(cap, q_at(cap), alpha, power)
            raise ValueError(f"no n <= cap={cap} detects a drop of max_drop={max_drop:.4g} with power {power} "
                             f"at alpha {alpha} ({shown}); at n={cap} the detectable drop is {at_cap:.4g}")
        lo, hi = hi, min(cap, 2 * hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi
