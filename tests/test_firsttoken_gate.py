"""The firsttoken verdict: near ties scale with the floor's noise; real flips and drift still fail."""

from __future__ import annotations

from glmcheck.checks.common import FAIL, INFO, PASS
from glmcheck.checks.firsttoken import PromptOutcome, summarize


class Names:
    def token_text(self, token: int) -> str:
        return f"<{token}>"


CONTROL, FLOOR = "reference (rerun)", "band:0"


def outcome(prompt: str, backend: str, gap: float, dlogprob: float, agree: bool = True) -> PromptOutcome:
    return PromptOutcome(prompt, backend, 1 if agree else 2, -6.0, 1, -6.0, gap, agree, dlogprob)


def table(kernel: list[PromptOutcome], floor_max: float = 0.1):
    outcomes = [outcome("p0", CONTROL, 0.5, 0.0), outcome("p1", CONTROL, 0.5, 0.0),
                outcome("p0", FLOOR, 0.5, floor_max), outcome("p1", FLOOR, 0.5, floor_max / 2)]
    return summarize(outcomes + kernel, [CONTROL, FLOOR, "kernel"], CONTROL, Names(), gate_ratio=2.0,
                     max_dlogprob=None, tie_gap=0.1, continue_tokens=0, noise_names=[FLOOR])


def verdicts(result) -> dict[str, str]:
    return {row["backend"]: row["verdict"] for row in result.summary_rows}


def test_flip_within_floor_noise_is_a_near_tie():
    result = table([outcome("p0", "kernel", 0.15, 0.0, agree=False), outcome("p1", "kernel", 0.5, 0.05)])
    assert verdicts(result) == {CONTROL: INFO, FLOOR: INFO, "kernel": PASS}
    assert result.facts["tie_gap"] == 0.2 and result.disagreements[0]["near_tie"]


def test_flip_beyond_floor_noise_fails():
    result = table([outcome("p0", "kernel", 0.25, 0.0, agree=False), outcome("p1", "kernel", 0.5, 0.05)])
    assert verdicts(result)["kernel"] == FAIL and result.verdict == FAIL


def test_drift_beyond_twice_the_floor_fails_without_flips():
    result = table([outcome("p0", "kernel", 0.5, 0.2), outcome("p1", "kernel", 0.5, 0.2)])
    assert verdicts(result)["kernel"] == FAIL  # mean 0.2 > 2 x floor mean 0.075


def test_without_floor_the_fixed_tie_gap_applies():
    outcomes = [outcome("p0", CONTROL, 0.5, 0.0), outcome("p0", "kernel", 0.15, 0.0, agree=False)]
    result = summarize(outcomes, [CONTROL, "kernel"], CONTROL, Names(), 2.0, 0.05, 0.1, 0)
    assert verdicts(result)["kernel"] == FAIL and result.facts["tie_gap"] == 0.1


def test_statistics_count_every_prompt():
    """0/2 agreement: the mean |dlogprob| is over both prompts, not over none (0.000 before)."""
    result = table([outcome("p0", "kernel", 0.05, 0.3, agree=False), outcome("p1", "kernel", 0.05, 0.5, agree=False)])
    row = next(r for r in result.summary_rows if r["backend"] == "kernel")
    assert row["agree"] == 0 and row["mean_dlogprob"] == 0.4 and row["verdict"] == FAIL


def test_cap_only_makes_the_gate_stricter():
    kernel = [outcome("p0", "kernel", 0.5, 0.06), outcome("p1", "kernel", 0.5, 0.06)]
    assert verdicts(table(kernel))["kernel"] == PASS  # 0.06 <= 2 x band mean 0.075
    outcomes = [outcome("p0", CONTROL, 0.5, 0.0), outcome("p1", CONTROL, 0.5, 0.0),
                outcome("p0", FLOOR, 0.5, 0.1), outcome("p1", FLOOR, 0.5, 0.05)] + kernel
    capped = summarize(outcomes, [CONTROL, FLOOR, "kernel"], CONTROL, Names(), 2.0, 0.05, 0.1, 0, noise_names=[FLOOR])
    assert verdicts(capped)["kernel"] == FAIL
    loose = [outcome("p0", "kernel", 0.5, 0.2), outcome("p1", "kernel", 0.5, 0.2)]
    assert verdicts(table(loose))["kernel"] == FAIL  # no cap can pass a row outside the band


def test_no_backend_judged_fails():
    outcomes = [outcome("p0", CONTROL, 0.5, 0.0), outcome("p0", "hf_sdpa", 0.5, 0.0)]
    result = summarize(outcomes, [CONTROL, "hf_sdpa"], CONTROL, Names(), 2.0, None, 0.1, 0,
                       not_judged={"hf_sdpa": "cross-check"})
    assert verdicts(result)["hf_sdpa"] == INFO and result.verdict == FAIL
