"""The paired 2x2 table of two runs over the same questions (`PairedTable`, `paired_table`).

Both servers answer the same questions, so the comparison is paired: per question one of four cells

    both right (a) | only the reference right (b) | only the candidate right (c) | both wrong (d),   n = a + b + c + d

The accuracies are (a + b) / n and (a + c) / n; their difference (candidate - reference) is (c - b) / n, the
*drop* is its negative (b - c) / n, and the *discordance* (the fraction of questions on which the two disagree)
is (b + c) / n. All accuracies, differences, drops and discordances here are fractions of questions (0.01 = one
percentage point), never percent.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np

_SHOWN_IDS = 5  # a mismatch names this many ids of each side


@dataclass(frozen=True)
class PairedTable:
    """The 2x2 table of per-question correctness, counts of questions: `both_right`, `only_reference` (the
    reference right, the candidate wrong), `only_candidate`, `both_wrong`. Accuracies, difference and
    discordance are fractions of the n questions."""

    both_right: int
    only_reference: int
    only_candidate: int
    both_wrong: int

    @property
    def n(self) -> int:
        """The number of questions (>= 1)."""
        return self.both_right + self.only_reference + self.only_candidate + self.both_wrong

    @property
    def reference_accuracy(self) -> float:
        """Fraction of the questions the reference got right."""
        return (self.both_right + self.only_reference) / self.n

    @property
    def candidate_accuracy(self) -> float:
        """Fraction of the questions the candidate got right."""
        return (self.both_right + self.only_candidate) / self.n

    @property
    def difference(self) -> float:
        """Candidate accuracy - reference accuracy (a fraction; negative = the candidate is worse)."""
        return (self.only_candidate - self.only_reference) / self.n

    @property
    def drop(self) -> float:
        """Reference accuracy - candidate accuracy (a fraction; positive = the candidate is worse)."""
        return -self.difference

    @property
    def discordant(self) -> int:
        """Questions on which the two disagree: only_reference + only_candidate."""
        return self.only_reference + self.only_candidate

    @property
    def discordance(self) -> float:
        """Fraction of the questions on which the two disagree."""
        return self.discordant / self.n


def _correct(value: object, name: str, qid: Hashable) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{name}[{qid!r}] must be a bool (right/wrong) or 0/1, got {value!r}")


def named_table(first: Mapping, second: Mapping, first_name: str, second_name: str) -> PairedTable:
    """`paired_table` of `first` against `second`, its messages naming them `first_name` and `second_name`
    (e.g. "control" for a control run)."""
    for obj, name in ((first, first_name), (second, second_name)):
        if not isinstance(obj, Mapping):
            raise ValueError(  # the contract: every bad input is a ValueError
                f"{name} must be a mapping question id -> bool, got {type(obj).__name__}")
    only_first = [k for k in first if k not in second]
    only_second = [k for k in second if k not in first]
    if only_first or only_second:
        def few(ids: list) -> str:
            shown = sorted(ids, key=repr)[:_SHOWN_IDS]
            return ", ".join(map(repr, shown)) + (", ..." if len(ids) > _SHOWN_IDS else "")

        parts = [f"{len(ids)} only in {name}: {few(ids)}" for ids, name in
                 ((only_first, first_name), (only_second, second_name)) if ids]
        raise ValueError(f"{first_name} and {second_name} must hold the same question ids; "
                         f"{len(only_first) + len(only_second)} ids differ ({'; '.join(parts)})")
    if not first:
        raise ValueError(f"{first_name} and {second_name} hold no questions; need n >= 1")
    cells = [0, 0, 0, 0]  # both right, only first, only second, both wrong
    for qid, value in first.items():
        r = _correct(value, first_name, qid)
        s = _correct(second[qid], second_name, qid)
        cells[(0 if s else 1) if r else (2 if s else 3)] += 1
    return PairedTable(*cells)


def paired_table(reference: Mapping[Hashable, bool], candidate: Mapping[Hashable, bool]) -> PairedTable:
    """The paired 2x2 table of two runs over the same questions (question id -> right/wrong; 0/1 accepted).

    Raises ValueError when either is not a mapping, a value is not a bool/0/1, the two do not hold exactly the
    same ids (naming how many differ and up to five of each side) or there are no questions (n >= 1)."""
    return named_table(reference, candidate, "reference", "candidate")
