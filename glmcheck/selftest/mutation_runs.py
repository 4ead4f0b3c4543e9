"""Run the accuracy suite on the real kernels (the baseline) and on every mutant.

A mutant is detected when at least one check fails on it. By default the suite stops at the
first failing check of a mutant (that check caught it); `exhaustive=True` runs every check.
Building a mutant is outside the per-check error handling: a mutant whose snippet is missing
raises MutantError instead of counting as detected.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from glmcheck.selftest.mutants import CATALOGUE, Mutant, mutated_kernels
from glmcheck.selftest.suite import SUITE, Check, Impl, Outcome, run_check

Progress = Callable[[str], None]


@dataclass(frozen=True)
class MutantResult:
    """The suite's verdict on one mutant."""

    mutant: Mutant
    outcomes: tuple[Outcome, ...]
    seconds: float

    @property
    def caught(self) -> Outcome | None:
        """The first failing check, or None when every check passed (not detected)."""
        return next((o for o in self.outcomes if not o.passed), None)

    @property
    def detected(self) -> bool:
        return self.caught is not None

    @property
    def caught_by(self) -> str | None:
        return None if self.caught is None else self.caught.name

    @property
    def margin(self) -> float | None:
        return None if self.caught is None else self.caught.margin


@dataclass(frozen=True)
class SelftestReport:
    """Baseline outcomes, per-mutant results and the wall time of each part."""

    baseline: tuple[Outcome, ...]
    mutants: tuple[MutantResult, ...]
    baseline_seconds: float
    mutant_seconds: float

    @property
    def baseline_passed(self) -> bool:
        return all(o.passed for o in self.baseline)

    @property
    def detected(self) -> int:
        return sum(r.detected for r in self.mutants)

    @property
    def total(self) -> int:
        return len(self.mutants)

    @property
    def score(self) -> float:
        """Fraction of mutants detected (1.0 when there are none)."""
        return self.detected / self.total if self.total else 1.0

    @property
    def passed(self) -> bool:
        """The baseline passes and every mutant is detected."""
        return self.baseline_passed and self.detected == self.total


def real_kernels() -> Impl:
    """The real `glmcheck.kernels` package."""
    import glmcheck.kernels

    return glmcheck.kernels


def run_suite(impl: Impl, seed: int = 0, checks: Sequence[Check] = SUITE,
              stop_at_first_failure: bool = False) -> tuple[Outcome, ...]:
    """Run `checks` on `impl` in order; optionally stop after the first failure."""
    outcomes = []
    for check in checks:
        outcomes.append(run_check(check, impl, seed))
        if stop_at_first_failure and not outcomes[-1].passed:
            break
    return tuple(outcomes)


def run_baseline(seed: int = 0, checks: Sequence[Check] = SUITE) -> tuple[Outcome, ...]:
    """Every check on the real kernels (all must pass)."""
    return run_suite(real_kernels(), seed, checks)


def run_mutant(mutant: Mutant, seed: int = 0, checks: Sequence[Check] = SUITE,
               exhaustive: bool = False) -> MutantResult:
    """Build `mutant`, run the suite on it (to its first failure unless exhaustive), clean up."""
    start = time.perf_counter()
    with mutated_kernels(mutant) as impl:
        outcomes = run_suite(impl, seed, checks, stop_at_first_failure=not exhaustive)
    return MutantResult(mutant, outcomes, time.perf_counter() - start)


def run_selftest(mutants: Sequence[Mutant] = CATALOGUE, seed: int = 0, checks: Sequence[Check] = SUITE,
                 exhaustive: bool = False, progress: Progress | None = None) -> SelftestReport:
    """The baseline suite, then every mutant in `mutants` (pass () for the baseline only)."""
    say = progress or (lambda message: None)
    start = time.perf_counter()
    say("baseline")
    baseline = run_baseline(seed, checks)
    baseline_seconds = time.perf_counter() - start
    results = []
    for mutant in mutants:
        say(mutant.name)
        results.append(run_mutant(mutant, seed, checks, exhaustive))
    return SelftestReport(baseline, tuple(results), baseline_seconds,
                          time.perf_counter() - start - baseline_seconds)
