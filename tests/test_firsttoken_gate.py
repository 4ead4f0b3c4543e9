"""The firsttoken verdict: near ties scale with the floor's noise; real flips and drift still fail."""

from __future__ import annotations

from glmcheck.checks.common import FAIL, INFO, PASS
from glmcheck.checks.firsttoken import PromptOutcome, summarize


class Names:
    def token_text(self, token: int) -> str:
        return f"<{token}>"


CONTROL, FLOOR = "reference (rerun)", "reference:bf16 (floor)"


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


def test_exact_reference_is_a_noise_row_when_the_reference_is_a_kernel():
    control, exact = "flashmla_sparse (rerun)", "reference"
    outcomes = [outcome("p0", control, 0.5, 0.0), outcome("p0", FLOOR, 0.5, 0.1),
                outcome("p0", exact, 0.34, 0.19, agree=False), outcome("p1", exact, 0.5, 0.19),
                outcome("p0", "kernel", 0.34, 0.0, agree=False), outcome("p1", "kernel", 0.5, 0.1)]
    result = summarize(outcomes, [control, FLOOR, exact, "kernel"], control, Names(), 2.0, None, 0.1, 0,
                       noise_names=[FLOOR, exact])
    assert verdicts(result) == {control: INFO, FLOOR: INFO, exact: INFO, "kernel": PASS}
    assert result.facts["tie_gap"] == 0.38
    assert "noise: reference (exact fp32) vs flashmla_sparse" in [r["comparison"] for r in result.summary_rows]
