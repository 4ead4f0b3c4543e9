"""The firsttoken verdict: near ties scale with the floor's noise; real flips and drift still fail."""

from __future__ import annotations

from glmcheck.checks.firsttoken import PromptOutcome, summarize
from glmcheck.checks.rows import FAIL, INCONCLUSIVE, INFO, PASS


class Names:
    def token_text(self, token: int) -> str:
        return f"<{token}>"


CONTROL = "reference (rerun)"
FLOORS = ["band:0", "band:1", "band:2"]  # the fewest ideal variants a gate judges with (MIN_BAND)


def outcome(prompt: str, backend: str, gap: float, dlogprob: float, agree: bool = True) -> PromptOutcome:
    return PromptOutcome(prompt, backend, 1 if agree else 2, -6.0, 1, -6.0, gap, agree, dlogprob)


def band_outcomes(floor_max: float = 0.1) -> list[PromptOutcome]:
    return [outcome("p0", CONTROL, 0.5, 0.0), outcome("p1", CONTROL, 0.5, 0.0)] + [
        o for name in FLOORS for o in (outcome("p0", name, 0.5, floor_max), outcome("p1", name, 0.5, floor_max / 2))]


def table(kernel: list[PromptOutcome], floor_max: float = 0.1):
    return summarize(band_outcomes(floor_max) + kernel, [CONTROL, *FLOORS, "kernel"], CONTROL, Names(),
                     gate_ratio=2.0, max_dlogprob=None, tie_gap=0.1, continue_tokens=0, noise_names=FLOORS)


def verdicts(result) -> dict[str, str]:
    return {row["backend"]: row["verdict"] for row in result.summary_rows}


def test_flip_within_floor_noise_is_a_near_tie():
    result = table([outcome("p0", "kernel", 0.15, 0.0, agree=False), outcome("p1", "kernel", 0.5, 0.05)])
    assert verdicts(result) == {CONTROL: INFO, **dict.fromkeys(FLOORS, INFO), "kernel": PASS}
    assert result.facts["tie_gap"] == 0.2 and result.disagreements[0]["near_tie"]


def test_flip_beyond_floor_noise_fails():
    result = table([outcome("p0", "kernel", 0.25, 0.0, agree=False), outcome("p1", "kernel", 0.5, 0.05)])
    assert verdicts(result)["kernel"] == FAIL and result.verdict == FAIL


def test_drift_beyond_twice_the_floor_fails_without_flips():
    result = table([outcome("p0", "kernel", 0.5, 0.2), outcome("p1", "kernel", 0.5, 0.2)])
    assert verdicts(result)["kernel"] == FAIL  # mean 0.2 > 2 x floor mean 0.075


def test_without_floor_the_fixed_tie_gap_applies_and_nothing_is_judged():
    outcomes = [outcome("p0", CONTROL, 0.5, 0.0), outcome("p0", "kernel", 0.15, 0.0, agree=False)]
    result = summarize(outcomes, [CONTROL, "kernel"], CONTROL, Names(), 2.0, 0.05, 0.1, 0)
    row = next(r for r in result.summary_rows if r["backend"] == "kernel")
    assert row["verdict"] == INCONCLUSIVE and result.facts["tie_gap"] == 0.1 and result.verdict == INCONCLUSIVE
    assert "a band of 0 ideal variants cannot judge" in row["note"] and "(the gate alone: FAIL: 1 flip" in row["note"]


def test_statistics_count_every_prompt():
    """0/2 agreement: the mean |dlogprob| is over both prompts, not over none (0.000 before)."""
    result = table([outcome("p0", "kernel", 0.05, 0.3, agree=False), outcome("p1", "kernel", 0.05, 0.5, agree=False)])
    row = next(r for r in result.summary_rows if r["backend"] == "kernel")
    assert row["agree"] == 0 and row["mean_dlogprob"] == 0.4 and row["verdict"] == FAIL


def test_cap_only_makes_the_gate_stricter():
    kernel = [outcome("p0", "kernel", 0.5, 0.06), outcome("p1", "kernel", 0.5, 0.06)]
    assert verdicts(table(kernel))["kernel"] == PASS  # 0.06 <= 2 x band mean 0.075
    capped = summarize(band_outcomes() + kernel, [CONTROL, *FLOORS, "kernel"], CONTROL, Names(), 2.0, 0.05, 0.1, 0,
                       noise_names=FLOORS)
    assert verdicts(capped)["kernel"] == FAIL
    loose = [outcome("p0", "kernel", 0.5, 0.2), outcome("p1", "kernel", 0.5, 0.2)]
    assert verdicts(table(loose))["kernel"] == FAIL  # no cap can pass a row outside the band


def test_no_backend_judged_fails():
    outcomes = [outcome("p0", CONTROL, 0.5, 0.0), outcome("p0", "hf_sdpa", 0.5, 0.0)]
    result = summarize(outcomes, [CONTROL, "hf_sdpa"], CONTROL, Names(), 2.0, None, 0.1, 0,
                       not_judged={"hf_sdpa": "cross-check"})
    assert verdicts(result)["hf_sdpa"] == INFO and result.verdict == FAIL


def _note(result) -> str:
    return next(r for r in result.summary_rows if r["backend"] == "kernel")["note"]


def test_a_fail_row_says_which_gate_failed():
    """Issue 44, item 8: a firsttoken FAIL row's note was empty."""
    flip = table([outcome("p0", "kernel", 0.25, 0.0, agree=False), outcome("p1", "kernel", 0.5, 0.05)])
    assert _note(flip) == "1 flip beyond the tie gap 0.2 nats (p0)"
    moved = table([outcome("p0", "kernel", 0.5, 0.2), outcome("p1", "kernel", 0.5, 0.2)])
    assert _note(moved) == "mean |dlogprob| 2.000e-01 > 1.500e-01 (gate ratio x the band's max mean)"
    kernel = [outcome("p0", "kernel", 0.5, 0.06), outcome("p1", "kernel", 0.5, 0.06)]
    capped = summarize(band_outcomes() + kernel, [CONTROL, *FLOORS, "kernel"], CONTROL, Names(), 2.0, 0.05, 0.1, 0,
                       noise_names=FLOORS)
    assert _note(capped) == "mean |dlogprob| 6.000e-02 > cap 0.05"
    assert _note(table([outcome("p0", "kernel", 0.5, 0.05), outcome("p1", "kernel", 0.5, 0.05)])) == ""


def test_a_band_with_one_wide_variant_cannot_judge():
    """A variant that moved 10 x more than the others (a flip) makes the gate admit anything below 2 x its
    mean: a row within that is INCONCLUSIVE, one beyond it still FAILS."""
    wide = [o for o in band_outcomes() if o.backend != "band:2"] + [outcome("p0", "band:2", 0.5, 1.0),
                                                                   outcome("p1", "band:2", 0.5, 0.5)]

    def judge(kernel):
        return summarize(wide + kernel, [CONTROL, *FLOORS, "kernel"], CONTROL, Names(), 2.0, None, 0.1, 0,
                         noise_names=FLOORS)

    within = judge([outcome("p0", "kernel", 0.5, 0.9), outcome("p1", "kernel", 0.5, 0.9)])
    assert verdicts(within)["kernel"] == INCONCLUSIVE and within.verdict == INCONCLUSIVE
    assert _note(within) == ("band too wide to judge: mean |dlogprob| max 7.500e-01 is 10.0 x its median 7.500e-02 "
                             "(limit 3 x); the gate would admit up to 1.500e+00 (the gate alone: PASS)")
    beyond = judge([outcome("p0", "kernel", 0.5, 2.0), outcome("p1", "kernel", 0.5, 2.0)])
    assert verdicts(beyond)["kernel"] == FAIL and beyond.verdict == FAIL


def test_a_continuation_is_judged_as_vllm_compares_them_beside_the_band():
    """issue 73: vLLM's check_logprobs_close figures (first divergence, each token in the other's top-k), judged
    like a first-token flip: a divergence outside the top-k, or across more than the near-tie gap, FAILS."""
    from glmcheck.checks.continuation import Step, compare

    ref = [Step(1, ((1, -0.1), (2, -0.3), (3, -4.0))), Step(4, ((4, -0.2), (5, -0.25)))]
    assert compare(ref, ref).position is None
    near = compare([ref[0], Step(5, ((5, -0.2), (4, -0.22)))], ref)
    assert (near.position, near.mutual) == (1, True) and abs(near.gap - 0.05) < 1e-12
    far = compare([Step(3, ((3, -0.1), (7, -0.2)))], ref)
    assert (far.position, far.mutual, far.gap) == (0, False, 3.9)

    def run(divergence):
        kernel = [outcome("p0", "kernel", 0.5, 0.0), outcome("p1", "kernel", 0.5, 0.0)]
        kernel[0].divergence, kernel[0].divergence_mutual, kernel[0].divergence_gap = divergence
        result = summarize(band_outcomes() + kernel, [CONTROL, *FLOORS, "kernel"], CONTROL, Names(), gate_ratio=2.0,
                           max_dlogprob=None, tie_gap=0.1, continue_tokens=2, noise_names=FLOORS)
        return next(r for r in result.summary_rows if r["backend"] == "kernel")

    assert run((1, True, 0.05))["verdict"] == PASS  # a near tie (<= 0.2 nats) within each other's top-k
    wide = run((0, True, 0.5))
    assert wide["verdict"] == FAIL and "diverging beyond a near tie" in wide["note"] and wide["wide_divergences"] == 1
    outside = run((0, False, float("inf")))
    assert outside["verdict"] == FAIL and outside["outside_topk"] == 1


def test_a_servers_continuation_is_compared_by_token_text():
    """Against servers (`max_tokens` N with logprobs) the same figures come from each position's top-k lists."""
    from glmcheck.evaluate.endpoint_checks import TokenTable, _outcome
    from glmcheck.sources.completions import Completion

    def answer(tokens, tops):
        return Completion("s", "m", "".join(tokens), tuple(tokens), tuple(t[0][1] for t in tops), tuple(tops), 3)

    ref = answer([" a", " b"], [((" a", -0.1), (" x", -2.5), (" y", -3.0)),
                                ((" b", -0.3), (" c", -0.35), (" d", -3.0))])
    near = answer([" a", " c"], [((" a", -0.1), (" x", -2.5), (" y", -3.0)),
                                 ((" c", -0.3), (" b", -0.33), (" d", -3.0))])
    far = answer([" a", " z"], [((" a", -0.1), (" x", -2.5), (" y", -3.0)), ((" z", -0.2), (" q", -0.4), (" r", -3.0))])
    table = TokenTable()
    found = _outcome("p0", "kernel", near, ref, table, True)
    assert (found.divergence, found.divergence_mutual) == (1, True) and abs(found.divergence_gap - 0.05) < 1e-12
    found = _outcome("p0", "kernel", far, ref, table, True)
    assert (found.divergence, found.divergence_mutual, found.divergence_gap) == (1, False, float("inf"))
    assert _outcome("p0", "kernel", ref, ref, table, True).divergence is None
