"""Next-token distributions as a source gives them, and the distance the length sweep judges.

In process a row has the full log-softmax over the vocabulary (`FullDistribution`, keys are token
ids); a server gives the top-k logprobs of each position (`TopKDistribution`, keys are token strings,
as OpenAI-compatible servers return them). `topk_distance` compares two of the same kind on the
reference's k most likely tokens, so the same number is computed from either source.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FullDistribution:
    """log-softmax [vocab] fp64 of one position's logits; keys are token ids."""

    logprobs: torch.Tensor

    @classmethod
    def from_logits(cls, logits: torch.Tensor) -> FullDistribution:
        return cls(torch.log_softmax(logits.double().flatten(), dim=-1).cpu())

    def top(self, k: int) -> list[tuple[int, float]]:
        values, ids = torch.topk(self.logprobs, min(k, self.logprobs.numel()))
        return [(int(i), float(v)) for i, v in zip(ids, values)]

    def logprob_of(self, key: Hashable) -> float | None:
        return float(self.logprobs[key]) if isinstance(key, int) and 0 <= key < self.logprobs.numel() else None

    def floor(self) -> float:
        return float(self.logprobs.min())


@dataclass(frozen=True)
class TopKDistribution:
    """The k most likely tokens of one position as a server lists them: (key, logprob) pairs, most
    likely first. A token not listed has a logprob at most `floor()` (the last listed one)."""

    entries: tuple[tuple[Hashable, float], ...]

    @classmethod
    def of(cls, pairs: Sequence[tuple[Hashable, float]]) -> TopKDistribution:
        return cls(tuple(sorted(((key, float(lp)) for key, lp in pairs), key=lambda kv: -kv[1])))

    def top(self, k: int) -> list[tuple[Hashable, float]]:
        return list(self.entries[:k])

    def logprob_of(self, key: Hashable) -> float | None:
        return next((lp for token, lp in self.entries if token == key), None)

    def floor(self) -> float:
        return self.entries[-1][1] if self.entries else float("-inf")


Distribution = FullDistribution | TopKDistribution


def topk_distance(row: Distribution, reference: Distribution, k: int) -> tuple[float, int]:
    """(mean over the reference's k most likely tokens t of |logprob_row(t) - logprob_ref(t)| in nats,
    how many of those t the row does not list). A token the row does not list counts at the row's
    floor (its last listed logprob, an upper bound of the true one), so the distance is then a lower
    bound. NaN when the reference lists nothing."""
    pairs = reference.top(k)
    if not pairs:
        return float("nan"), 0
    total, unlisted = 0.0, 0
    for key, ref_lp in pairs:
        mine = row.logprob_of(key)
        if mine is None:
            mine, unlisted = row.floor(), unlisted + 1
        total += abs(mine - ref_lp)
    return total / len(pairs), unlisted
