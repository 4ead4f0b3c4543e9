"""Paired verdict for task accuracy: is a candidate server's accuracy drop against a reference real?

The paired 2x2 table and its notation are in `glmcheck.tasks.paired_table`, the exact McNemar test and its
power in `glmcheck.tasks.mcnemar`, the paired bootstrap in `glmcheck.tasks.bootstrap`; this module judges
with them and re-exports their public names.

Verdict (`paired_verdict`): FAIL when the one-sided McNemar p < alpha and the observed drop > max_drop; else PASS
when the detectable drop <= max_drop (a drop of max_drop or more would have been seen with the stated power); else
INCONCLUSIVE, with the number of questions that would make it judge. A control (the reference queried again)
that differs from the reference itself (two-sided p < alpha) sets a warning; it does not change the verdict.

Pure numpy/scipy; no torch.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import asdict, dataclass

import numpy as np

from glmcheck.checks.band import FAIL, INCONCLUSIVE, PASS  # the verdict words, one place
from glmcheck.tasks.bootstrap import paired_bootstrap
from glmcheck.tasks.mcnemar import (
    NEEDED_CAP,
    check_alpha_power,
    check_prob,
    detectable_drop,
    discordance_bound,
    fail_rule,
    mcnemar_exact,
    mcnemar_power,  # re-exported: the power the verdict is judged by
    needed_questions,
    passes,
)
from glmcheck.tasks.paired_table import PairedTable, named_table, paired_table

__all__ = [
    "FAIL",
    "INCONCLUSIVE",
    "PASS",
    "PairedTable",
    "PairedVerdict",
    "detectable_drop",
    "discordance_bound",
    "fail_rule",
    "mcnemar_exact",
    "mcnemar_power",
    "needed_questions",
    "paired_bootstrap",
    "paired_table",
    "paired_verdict",
]


# ------------------------------------------------------------------------------------------------ the verdict


@dataclass(frozen=True)
class PairedVerdict:
    """A candidate's task accuracy against the reference's, paired over the same questions.

    Fractions of questions throughout (0.01 = 1 point): `reference_accuracy`, `candidate_accuracy`,
    `difference` (candidate - reference), `interval` (its percentile bootstrap interval at `level`),
    `discordance` (the one used for power: the Clopper-Pearson upper bound at `discordance_level` of the
    observed discordance, the larger of the candidate's and the control's), `detectable_drop` (inf: none),
    `max_drop`. p values: the exact McNemar `p_two_sided` and `p_one_sided_drop` (candidate worse).
    `needed_questions`: the smallest n at which a drop of max_drop would be detected with `power`, the observed
    disagreement rate assumed to persist (more than n when INCONCLUSIVE; None when none exists: max_drop = 0 or
    beyond `NEEDED_CAP`). The control_* fields are None without a control; `warning` is set when the control
    itself differs from the reference (two-sided p < alpha). `verdict` PASS / FAIL / INCONCLUSIVE, `reason` one
    line."""

    table: PairedTable
    reference_accuracy: float
    candidate_accuracy: float
    difference: float
    interval: tuple[float, float]
    level: float
    p_two_sided: float
    p_one_sided_drop: float
    discordance: float
    discordance_level: float
    detectable_drop: float
    needed_questions: int | None
    max_drop: float
    alpha: float
    power: float
    verdict: str
    reason: str
    control_table: PairedTable | None = None
    control_difference: float | None = None
    control_p_two_sided: float | None = None
    control_p_one_sided_drop: float | None = None
    warning: str | None = None

    @property
    def n(self) -> int:
        """The number of paired questions."""
        return self.table.n

    def as_dict(self) -> dict:
        """A flat record row: every field, the tables' cells prefixed (`table_`, `control_table_`), the
        interval as `interval_low` / `interval_high`."""
        row = asdict(self)
        for key in ("table", "control_table"):
            cells = row.pop(key)
            for cell in ("both_right", "only_reference", "only_candidate", "both_wrong"):
                row[f"{key}_{cell}"] = None if cells is None else cells[cell]
        row["interval_low"], row["interval_high"] = row.pop("interval")
        row["n"] = self.n
        return row


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def paired_verdict(reference: Mapping[Hashable, bool], candidate: Mapping[Hashable, bool], *,
                   control: Mapping[Hashable, bool] | None = None, max_drop: float = 0.01, alpha: float = 0.05,
                   power: float = 0.8, iters: int = 10000, seed: int = 0, level: float = 0.95,
                   discordance_level: float = 0.95) -> PairedVerdict:
    """Judge whether the candidate's accuracy drop against the reference is real (see the module docstring).

    `reference`, `candidate`, `control` (optional: the reference queried again, or a second instance): mappings
    question id -> bool over the same ids (ValueError naming the differing ids otherwise). `max_drop`: the
    largest acceptable drop, a fraction in [0, 1) (0 = any significant drop fails, and nothing can PASS).
    `alpha`: the McNemar test's level; `power`: the detection probability a PASS needs (0 < alpha < power < 1).
    `iters`, `seed`, `level`: the paired bootstrap interval. `discordance_level`: the one-sided Clopper-Pearson
    level of the discordance used for power.

    FAIL: one-sided McNemar p < alpha and observed drop > max_drop. PASS: not FAIL and detectable_drop <=
    max_drop. INCONCLUSIVE: otherwise, with `needed_questions`. A control differing from the reference
    (two-sided p < alpha) sets `warning`, never the verdict."""
    if not (isinstance(max_drop, (int, float, np.integer, np.floating)) and not isinstance(max_drop, bool)
            and 0 <= max_drop < 1):
        raise ValueError(f"max_drop must be a drop in [0, 1) (a fraction of questions, 0.01 = 1 point), "
                         f"got {max_drop!r}")
    max_drop = float(max_drop)
    alpha, power = check_alpha_power(alpha, power)
    discordance_level = check_prob(discordance_level, "discordance_level")
    table = paired_table(reference, candidate)
    n = table.n
    p_two, p_one = mcnemar_exact(table.only_reference, table.only_candidate)
    low, high = paired_bootstrap(reference, candidate, iters=iters, seed=seed, level=level)

    discordant = table.discordant
    control_fields: dict = {}
    warning = None
    if control is not None:
        ctable = named_table(reference, control, "reference", "control")
        c_two, c_one = mcnemar_exact(ctable.only_reference, ctable.only_candidate)
        control_fields = {"control_table": ctable, "control_difference": ctable.difference,
                          "control_p_two_sided": c_two, "control_p_one_sided_drop": c_one}
        discordant = max(discordant, ctable.discordant)
        if c_two < alpha:
            warning = (f"the control differs from the reference itself ({_pct(ctable.difference)}, two-sided "
                       f"McNemar p = {c_two:.3g} < {alpha}): the stack does not rerun reproducibly enough; "
                       f"judge the candidate with care")
    q = discordance_bound(discordant, n, discordance_level)
    detectable = detectable_drop(n, q, alpha, power)

    needed: int | None = None
    needed_note = ""
    if max_drop > 0:
        can_pass = passes(n, max_drop, q, alpha, power)
        try:
            needed = needed_questions(max_drop, discordant / n, alpha, power, bound_level=discordance_level,
                                      n_min=1 if can_pass else n + 1)
        except ValueError:
            needed_note = f"more than {NEEDED_CAP} questions would be needed"
    else:
        can_pass = False
        needed_note = "max_drop = 0: no number of questions can show a drop of 0 is absent"

    drop = table.drop
    counts = f"{table.only_reference} vs {table.only_candidate} discordant of {n}"
    if bool(fail_rule(p_one, drop, alpha, max_drop)):
        verdict = FAIL
        reason = (f"the candidate is significantly worse: drop {_pct(drop)} > max {_pct(max_drop)} "
                  f"(one-sided McNemar p = {p_one:.3g} < {alpha}; {counts})")
    elif can_pass:
        verdict = PASS
        seen = (f"observed difference {_pct(table.difference)}" +
                (f", significant (p = {p_one:.3g}) but within max" if p_one < alpha and drop > 0 else ""))
        reason = (f"a drop of {_pct(max_drop)} or more would be detected with probability >= {power} "
                  f"(detectable drop {_pct(detectable)} at discordance <= {_pct(q)}, n = {n}); {seen}")
    else:
        verdict = INCONCLUSIVE
        shown = ("no drop is detectable" if math.isinf(detectable)
                 else f"only drops >= {_pct(detectable)} are detectable")
        tail = (f"about {needed} questions needed for {_pct(max_drop)}" if needed is not None else needed_note)
        reason = (f"{shown} with power {power} over {n} questions (discordance <= {_pct(q)}; {counts}); {tail}")
    return PairedVerdict(
        table=table, reference_accuracy=table.reference_accuracy, candidate_accuracy=table.candidate_accuracy,
        difference=table.difference, interval=(low, high), level=level, p_two_sided=p_two, p_one_sided_drop=p_one,
        discordance=q, discordance_level=discordance_level, detectable_drop=detectable, needed_questions=needed,
        max_drop=max_drop, alpha=alpha, power=power, verdict=verdict, reason=reason, warning=warning,
        **control_fields)
