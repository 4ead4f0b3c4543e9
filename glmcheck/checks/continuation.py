"""Greedy continuations compared as vLLM's `check_logprobs_close` compares them (`firsttoken --continue N`).

Two runs' greedy continuations of N tokens are compared token by token up to the first position where they differ
(after it the two sequences no longer share a prefix). vLLM's figures there: the position, and whether each side's
token is within the other's top-k (k = CONTINUE_TOP_K, vLLM's usual `num_logprobs`). glmcheck judges that
divergence as it judges a first-token flip, beside the band: it is *wide* when either token is outside the other's
top-k, or when the reference's logprob of its own token exceeds its logprob of the row's by more than the near-tie
gap (`glmcheck.checks.firsttoken`: max(--tie-gap, gate ratio x the band's largest |dlogprob|)). A row with a wide
divergence FAILS; identical continuations and near-tie divergences pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONTINUE_TOP_K = 5


@dataclass(frozen=True)
class Step:
    """One greedy step: the chosen token and the top-k (token, logprob), most likely first. Tokens are ids in
    process, texts against a server: any hashable that two runs name alike."""

    token: object
    top: tuple[tuple[object, float], ...]


@dataclass(frozen=True)
class Divergence:
    """Where a row's continuation first differs from the reference's (None: identical over the shorter one),
    whether each token is within the other's top-k there, and the reference's logprob of its own token minus
    its logprob of the row's (nats; inf when the row's token is not in its top-k)."""

    position: int | None
    mutual: bool | None = None
    gap: float | None = None


def compare(mine: Sequence[Step], reference: Sequence[Step], k: int = CONTINUE_TOP_K) -> Divergence:
    """The first divergence of `mine` from `reference` (module docstring)."""
    for position, (a, b) in enumerate(zip(mine, reference)):
        if a.token == b.token:
            continue
        in_ref = dict(b.top[:k])
        in_mine = {t for t, _ in a.top[:k]}
        mutual = a.token in in_ref and b.token in in_mine
        own = in_ref.get(b.token, b.top[0][1] if b.top else math.nan)
        gap = own - in_ref[a.token] if a.token in in_ref else math.inf
        return Divergence(position, mutual, gap)
    return Divergence(None)


def is_wide(mutual: bool | None, gap: float | None, near_tie: float) -> bool:
    """A divergence outside the other's top-k, or wider than the near-tie gap (module docstring)."""
    if mutual is None:
        return False
    return not mutual or not (gap is not None and gap <= near_tie)
