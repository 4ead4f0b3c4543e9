"""Issue 42: the paired task-accuracy verdict (`glmcheck.tasks.paired`). The exact McNemar p values against scipy's
binomtest, the bootstrap's coverage, the false-FAIL rate at no difference, the detection rate at the stated
detectable drop, and the verdicts of the issue's cases. Simulations draw the paired table's counts as one
Multinomial(n, cell probabilities) per run (the exact distribution of the counts of n independent questions),
vectorised over thousands of runs; a few hundred runs also go question by question through the real functions.

Tolerances: a simulated rate over N runs has standard error sqrt(r (1 - r) / N); a rate is accepted within 4 of
them of its target (a deviation that large by chance has probability ~6e-5 per check; the seeds are fixed, so a
pass is reproducible)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from scipy.stats import beta, binomtest

from glmcheck.tasks.paired import (
    FAIL,
    INCONCLUSIVE,
    NEEDED_CAP,
    PASS,
    PairedTable,
    detectable_drop,
    discordance_bound,
    fail_rule,
    mcnemar_exact,
    mcnemar_power,
    needed_questions,
    paired_bootstrap,
    paired_table,
    paired_verdict,
)

Z = 4.0  # simulation tolerance, in standard errors


def _tables(rng, n: int, p_only_ref: float, p_only_cand: float, runs: int) -> tuple[np.ndarray, np.ndarray]:
    """(only_ref, only_cand) counts of `runs` simulated pairs of runs over n independent questions."""
    counts = rng.multinomial(n, [p_only_ref, p_only_cand, 1.0 - p_only_ref - p_only_cand], size=runs)
    return counts[:, 0], counts[:, 1]


def _runs(n: int, cells: tuple[int, int, int, int]) -> tuple[dict, dict]:
    """Reference and candidate mappings with the given (both right, only ref, only cand, both wrong) counts."""
    a, b, c, d = cells
    assert a + b + c + d == n
    ref = [True] * a + [True] * b + [False] * c + [False] * d
    cand = [True] * a + [False] * b + [True] * c + [False] * d
    return {f"q{i}": v for i, v in enumerate(ref)}, {f"q{i}": v for i, v in enumerate(cand)}


# ------------------------------------------------------------------------------------------------ McNemar


def test_mcnemar_exact_equals_binomtest_on_a_grid():
    """Two-sided and one-sided (greater: the reference wins more discordant pairs) p of binomtest(b, b + c, 1/2),
    on every (b, c) in 0..20 and some large or lopsided pairs; m = 0 (no binomtest) is (1, 1)."""
    grid = [(b, c) for b in range(21) for c in range(21)] + [(0, 60), (60, 0), (300, 250), (1000, 1100), (7, 400)]
    for b, c in grid:
        two, one = mcnemar_exact(b, c)
        assert isinstance(two, float) and isinstance(one, float)
        if b + c == 0:
            assert (two, one) == (1.0, 1.0)
            continue
        ref_two = binomtest(b, b + c, 0.5, alternative="two-sided").pvalue
        ref_one = binomtest(b, b + c, 0.5, alternative="greater").pvalue
        assert two == pytest.approx(ref_two, rel=1e-9, abs=1e-300), (b, c)
        assert one == pytest.approx(ref_one, rel=1e-9, abs=1e-300), (b, c)
    b, c = np.array(grid).T
    two, one = mcnemar_exact(b, c)  # elementwise on arrays, the same numbers
    assert two.shape == one.shape == b.shape
    assert [mcnemar_exact(int(x), int(y)) for x, y in grid[:50]] == list(zip(two[:50], one[:50]))


def test_mcnemar_exact_equals_statsmodels_when_present():
    sm = pytest.importorskip("statsmodels.stats.contingency_tables")
    for b, c in [(0, 0), (3, 9), (12, 4), (40, 41), (0, 17)]:
        assert mcnemar_exact(b, c)[0] == pytest.approx(sm.mcnemar([[5, b], [c, 5]], exact=True).pvalue, rel=1e-9)


@pytest.mark.parametrize("b, c", [(-1, 3), (2.5, 1), (True, 1), ("3", 1)])
def test_mcnemar_exact_rejects_bad_counts(b, c):
    with pytest.raises(ValueError, match="only_ref must be a count"):
        mcnemar_exact(b, c)


# ------------------------------------------------------------------------------------------------ bootstrap


@pytest.mark.parametrize("n, q, drop", [(400, 0.15, 0.03), (1000, 0.08, 0.0)])
def test_bootstrap_interval_covers_the_true_difference_at_its_nominal_rate(n, q, drop):
    """400 simulated pairs of runs (question by question), a 95 % interval each: the coverage of the true
    difference -drop is 0.95 within 4 standard errors (0.011 at 400 runs) plus 0.01 for the percentile
    bootstrap's own small-sample bias (2000 runs of the first setting measured 0.951). The mean width is the
    paired normal-theory 2 x 1.96 sqrt((q - drop^2) / n) within 5 % (its run-to-run spread averages to < 1 %):
    resampling the two runs apart (pairs broken) would widen it by 1.7-2.3x here and cover ~100 %."""
    rng = np.random.default_rng(42)
    p_b, p_c = (q + drop) / 2, (q - drop) / 2
    runs = 400
    hits = 0
    widths = []
    for i in range(runs):
        cell = rng.choice(3, size=n, p=[p_b, p_c, 1 - q])  # 0: only ref right, 1: only cand, 2: agree
        agree_right = rng.random(n) < 0.7
        ref = np.where(cell == 2, agree_right, cell == 0)
        cand = np.where(cell == 2, agree_right, cell == 1)
        low, high = paired_bootstrap(ref, cand, iters=2000, seed=i)
        hits += low <= -drop <= high
        widths.append(high - low)
    coverage = hits / runs
    se = math.sqrt(0.95 * 0.05 / runs)
    assert abs(coverage - 0.95) <= Z * se + 0.01, coverage
    assert np.mean(widths) == pytest.approx(2 * 1.959964 * math.sqrt((q - drop**2) / n), rel=0.05)


def test_bootstrap_is_vectorised_and_accepts_mappings():
    """10000 iterations over 10000 questions well under a second; a mapping and the aligned arrays give the
    same interval (the same seed); no disagreement gives (0, 0)."""
    rng = np.random.default_rng(3)
    ref = rng.random(10000) < 0.8
    cand = ref ^ (rng.random(10000) < 0.05)
    start = time.perf_counter()
    low, high = paired_bootstrap(ref, cand, iters=10000, seed=0)
    assert time.perf_counter() - start < 1.0
    assert low < cand.mean() - ref.mean() < high
    as_map = paired_bootstrap(dict(enumerate(ref)), dict(enumerate(cand)), iters=10000, seed=0)
    assert as_map == (low, high)
    assert paired_bootstrap({1: True, 2: False}, {1: True, 2: False}) == (0.0, 0.0)
    with pytest.raises(ValueError, match="iters"):
        paired_bootstrap(ref, cand, iters=0)
    with pytest.raises(ValueError, match="aligned"):
        paired_bootstrap(ref, cand[:-1])


# ------------------------------------------------------------------------------------------------ error rates

NULL_CASES = [(n, q) for n in (50, 300, 2000) for q in (0.03, 0.15, 0.4)]


@pytest.mark.parametrize("max_drop", [0.0, 0.01])
def test_false_fail_rate_at_no_difference_is_at_most_alpha(max_drop):
    """20000 pairs of runs of equal accuracy per (n, discordance) (9 settings): the FAIL rule of paired_verdict
    (`fail_rule` on mcnemar_exact's one-sided p) fires in <= 5 % of them, within 4 standard errors (0.006). The
    exact conditional test's size is <= alpha, so the rate is usually well below."""
    rng = np.random.default_rng(7)
    runs = 20000
    for n, q in NULL_CASES:
        b, c = _tables(rng, n, q / 2, q / 2, runs)
        _, p_one = mcnemar_exact(b, c)
        rate = fail_rule(p_one, (b - c) / n, 0.05, max_drop).mean()
        assert rate <= 0.05 + Z * math.sqrt(0.05 * 0.95 / runs), (n, q, rate)


def test_false_fail_rate_question_by_question_through_paired_verdict():
    """Questions of unequal difficulty (p_i ~ Beta(2, 1)); the candidate reruns each independently at the same
    p_i (no real difference, discordance ~1/3). 2000 runs of 200 questions: FAIL rate <= 5 % (+4 SE); the first
    40 go through paired_verdict itself, whose verdict must be FAIL exactly where the vectorised rule says."""
    rng = np.random.default_rng(11)
    runs, n = 2000, 200
    p = rng.beta(2, 1, size=(runs, n))
    ref = rng.random((runs, n)) < p
    cand = rng.random((runs, n)) < p
    b = (ref & ~cand).sum(axis=1)
    c = (cand & ~ref).sum(axis=1)
    _, p_one = mcnemar_exact(b, c)
    fails = fail_rule(p_one, (b - c) / n, 0.05, 0.0)
    assert fails.mean() <= 0.05 + Z * math.sqrt(0.05 * 0.95 / runs), fails.mean()
    for i in range(40):
        verdict = paired_verdict(dict(enumerate(ref[i])), dict(enumerate(cand[i])), max_drop=0.0, iters=200)
        assert (verdict.verdict == FAIL) == bool(fails[i]), (i, verdict.reason)
        assert verdict.verdict != PASS  # max_drop = 0: nothing can show a drop of 0 is absent


DETECT_CASES = [(100, 0.1), (500, 0.05), (1000, 0.2), (5000, 0.02), (300, 0.005), (2000, 0.0015)]


@pytest.mark.parametrize("n, q", DETECT_CASES)
def test_detection_at_the_detectable_drop_is_the_stated_power(n, q):
    """Pairs of runs with a true drop = detectable_drop(n, q) (the last two beyond q: every disagreement a loss):
    the one-sided McNemar test at 0.05 rejects in 80 % of 20000 runs within 4 standard errors (0.011), on both
    sides (the power there is exactly 0.8: the drop is the smallest so detected), and mcnemar_power agrees."""
    drop = detectable_drop(n, q)
    assert 0 < drop < 1
    assert mcnemar_power(n, drop, q) >= 0.8 > mcnemar_power(n, 0.97 * drop, q)
    qq = max(q, drop)
    b, c = _tables(np.random.default_rng(n), n, (qq + drop) / 2, (qq - drop) / 2, 20000)
    _, p_one = mcnemar_exact(b, c)
    rate = (p_one < 0.05).mean()
    assert abs(rate - 0.8) <= Z * math.sqrt(0.8 * 0.2 / 20000), (n, q, drop, rate)


def test_detectable_drop_shapes():
    """Shrinks with n, grows with discordance; inf below the 5 questions a one-sided 0.05 test needs."""
    drops = [detectable_drop(n, 0.1) for n in (50, 200, 1000, 5000)]
    assert drops == sorted(drops, reverse=True)
    assert detectable_drop(1000, 0.02) < detectable_drop(1000, 0.1) < detectable_drop(1000, 0.3)
    assert math.isinf(detectable_drop(4, 0.5)) and math.isfinite(detectable_drop(5, 0.5))
    with pytest.raises(ValueError, match="power must exceed alpha"):
        detectable_drop(100, 0.1, alpha=0.2, power=0.1)
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        detectable_drop(0, 0.1)


@pytest.mark.parametrize("max_drop, q", [(0.02, 0.1), (0.01, 0.03), (0.05, 0.01)])
def test_needed_questions_is_where_the_detectable_drop_reaches_max_drop(max_drop, q):
    n = needed_questions(max_drop, q)
    assert detectable_drop(n, q) <= max_drop + 1e-9 < detectable_drop(n - 1, q)


def test_needed_questions_says_when_impossible():
    with pytest.raises(ValueError, match="max_drop must be a drop in"):
        needed_questions(0.0, 0.1)
    with pytest.raises(ValueError, match=r"no n <= cap=1000 detects"):
        needed_questions(0.001, 0.5, cap=1000)
    assert NEEDED_CAP >= 10**6


# ------------------------------------------------------------------------------------------------ the verdicts


def test_identical_answers_on_20_questions_are_inconclusive_and_on_enough_pass():
    """No disagreement on 20 questions proves nothing: the Clopper-Pearson bound of 0/20 is 13.9 % and only a
    drop of ~31 % would be seen. The count it names suffices (PASS), and 19 questions fewer do not."""
    ref, cand = _runs(20, (14, 0, 0, 6))
    v = paired_verdict(ref, cand)
    assert v.verdict == INCONCLUSIVE, v.reason
    assert v.discordance == pytest.approx(1 - 0.05 ** (1 / 20))
    assert v.needed_questions > 20 and str(v.needed_questions) in v.reason
    need = v.needed_questions
    ref, cand = _runs(need, (need // 2, 0, 0, need - need // 2))
    assert paired_verdict(ref, cand).verdict == PASS
    ref, cand = _runs(need - 19, (need // 2, 0, 0, need - 19 - need // 2))
    assert paired_verdict(ref, cand).verdict == INCONCLUSIVE
    ref, cand = _runs(5000, (4000, 0, 0, 1000))
    v = paired_verdict(ref, cand)
    assert v.verdict == PASS and v.difference == 0 and v.interval == (0.0, 0.0), v.reason


def test_a_large_real_drop_fails():
    ref, cand = _runs(1000, (700, 60, 10, 230))  # 76 % -> 71 %
    v = paired_verdict(ref, cand)
    assert v.verdict == FAIL, v.reason
    assert v.reference_accuracy == 0.76 and v.candidate_accuracy == 0.71
    assert v.difference == pytest.approx(-0.05) and v.interval[1] < -0.01
    assert v.p_one_sided_drop < 1e-9 and v.p_two_sided == pytest.approx(2 * v.p_one_sided_drop)
    assert "significantly worse" in v.reason


def test_a_borderline_drop_fails_on_the_one_sided_p():
    """33 vs 19 discordant of 1000 (drop 1.4 %): one-sided p = 0.035 < 0.05 <= two-sided 0.070. The question is
    one-sided (is the candidate worse?), so it FAILS; the mirror image (the candidate better) does not."""
    ref, cand = _runs(1000, (700, 33, 19, 248))
    v = paired_verdict(ref, cand)
    assert v.p_one_sided_drop < 0.05 <= v.p_two_sided
    assert v.verdict == FAIL, v.reason
    assert paired_verdict(cand, ref).verdict != FAIL


def test_a_significant_drop_within_max_drop_does_not_fail():
    """0.6 % significantly worse on 20000 questions: not beyond the 1 % accepted, and a 1 % drop would show."""
    ref, cand = _runs(20000, (15000, 150, 30, 4820))
    v = paired_verdict(ref, cand)
    assert v.p_one_sided_drop < 0.05 and v.verdict == PASS, v.reason
    assert paired_verdict(ref, cand, max_drop=0.005).verdict == FAIL


def test_low_discordance_is_bounded_by_clopper_pearson():
    """5 vs 5 disagreements on 1000 questions: at the observed 1 % discordance a 1 % drop would be detectable
    (PASS), but 10 of 1000 is also consistent with 1.6 %, where it is not: INCONCLUSIVE. The level is a
    parameter; at 0.5 the bound is near the observed rate and the verdict PASSes."""
    ref, cand = _runs(1000, (700, 5, 5, 290))
    v = paired_verdict(ref, cand)
    assert v.discordance == pytest.approx(beta.ppf(0.95, 11, 990)) == discordance_bound(10, 1000)
    assert detectable_drop(1000, 0.01) <= 0.01 < v.detectable_drop
    assert v.verdict == INCONCLUSIVE and v.needed_questions > 1000, v.reason
    assert paired_verdict(ref, cand, discordance_level=0.5).verdict == PASS


def test_a_control_that_differs_warns_and_its_discordance_counts():
    ref, cand = _runs(2000, (1500, 0, 0, 500))
    control = dict(ref)
    for i in range(40):  # the rerun loses 40 answers: a significant difference on its own
        control[f"q{i}"] = False
    v = paired_verdict(ref, cand, control=control)
    assert v.control_difference == pytest.approx(-0.02) and v.control_p_two_sided < 0.05
    assert v.warning and "does not rerun reproducibly" in v.warning
    assert v.verdict != FAIL and v.difference == 0  # the warning never fails the candidate
    assert v.discordance == pytest.approx(discordance_bound(40, 2000))  # the control's larger discordance
    quiet = paired_verdict(ref, cand, control=dict(ref))
    assert quiet.warning is None and quiet.verdict == PASS and quiet.control_p_two_sided == 1.0
    assert paired_verdict(ref, cand).control_difference is None


def test_mismatched_ids_are_a_value_error_naming_them():
    ref = {"a": True, "b": False, "c": True, "d": True}
    cand = {"a": True, "b": False, "x": True}
    with pytest.raises(ValueError, match=r"3 ids differ \(2 only in reference: 'c', 'd'; 1 only in candidate: 'x'\)"):
        paired_table(ref, cand)
    with pytest.raises(ValueError, match="only in control: 'x'"):
        paired_verdict(ref, dict(ref), control=cand)
    many = dict.fromkeys(range(100), True)
    with pytest.raises(ValueError, match=r"100 ids differ \(100 only in reference: 0, 1, 10, 11, 12, \.\.\.\)"):
        paired_table(many, {})


@pytest.mark.parametrize("ref, cand, match", [
    ({}, {}, "no questions; need n >= 1"),
    ({"a": "yes"}, {"a": True}, r"reference\['a'\] must be a bool"),
    ({"a": True}, {"a": None}, r"candidate\['a'\] must be a bool"),
    ([True], {"a": True}, "reference must be a mapping"),
])
def test_bad_tables(ref, cand, match):
    with pytest.raises(ValueError, match=match):
        paired_table(ref, cand)


def test_table_and_verdict_fields():
    t = paired_table({1: True, 2: True, 3: False, 4: False, 5: 1}, {1: True, 2: False, 3: True, 4: False, 5: 0})
    assert t == PairedTable(both_right=1, only_reference=2, only_candidate=1, both_wrong=1)
    assert (t.n, t.discordant, t.reference_accuracy, t.candidate_accuracy) == (5, 3, 0.6, 0.4)
    assert t.difference == pytest.approx(-0.2) and t.discordance == 0.6
    ref, cand = _runs(4, (2, 0, 0, 2))
    v = paired_verdict(ref, cand)
    assert v.verdict == INCONCLUSIVE and math.isinf(v.detectable_drop) and "no drop is detectable" in v.reason
    row = v.as_dict()
    assert row["n"] == 4 and row["table_both_right"] == 2 and row["control_table_both_right"] is None
    with pytest.raises(ValueError, match="max_drop must be a drop in"):
        paired_verdict(ref, cand, max_drop=1.5)
