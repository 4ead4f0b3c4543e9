"""The paired bootstrap interval of the accuracy difference candidate - reference (`paired_bootstrap`), a
fraction of questions. Counts as in `glmcheck.tasks.paired_table` (b: only the reference right, c: only the
candidate, m = b + c).

Resample the n questions with replacement, pairs kept together, and take the percentile interval of the
resampled (c* - b*) / n. A question contributes only -1, 0 or +1 to the difference, so the resampled counts
(b*, c*, n - b* - c*) are Multinomial(n, (b/n, c/n, 1 - m/n)): drawing them directly is exactly the
question-resampling bootstrap, at a cost independent of n.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import numpy as np

from glmcheck.tasks.paired_table import paired_table


def _bootstrap_counts(reference: object, candidate: object) -> tuple[int, int, int]:
    if isinstance(reference, Mapping) or isinstance(candidate, Mapping):
        t = paired_table(reference, candidate)
        return t.n, t.only_reference, t.only_candidate
    r = np.asarray(reference)
    c = np.asarray(candidate)
    for arr, name in ((r, "reference"), (c, "candidate")):
        if arr.ndim != 1 or not (arr.dtype == bool or np.isin(arr, (0, 1)).all()):
            raise ValueError(f"{name} must be a mapping id -> bool or a 1-D array of bools/0-1, got shape "
                             f"{arr.shape}, dtype {arr.dtype}")
    if r.shape != c.shape:
        raise ValueError(f"reference and candidate must be aligned: {r.shape[0]} vs {c.shape[0]} questions")
    if r.size == 0:
        raise ValueError("reference and candidate hold no questions; need n >= 1")
    r = r.astype(bool)
    c = c.astype(bool)
    return int(r.size), int(np.count_nonzero(r & ~c)), int(np.count_nonzero(c & ~r))


def paired_bootstrap(reference: Mapping[Hashable, bool] | np.ndarray, candidate: Mapping[Hashable, bool] | np.ndarray,
                     iters: int = 10000, seed: int = 0,
                     level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the accuracy difference candidate - reference (a fraction).

    `reference`, `candidate`: mappings question id -> bool with the same ids (as `paired_table`), or aligned 1-D
    bool/0-1 arrays. Resamples the questions with replacement, each question's pair kept together, `iters`
    times (>= 1) from `numpy.random.default_rng(seed)`, and returns the ((1 - level) / 2, (1 + level) / 2)
    quantiles of the resampled differences, 0 < level < 1. Only the discordant counts move the difference, so
    the resampled counts are drawn as one Multinomial(n, (b/n, c/n, rest)) per iteration: the same
    distribution as resampling question indices, O(iters) whatever n."""
    if isinstance(iters, bool) or not isinstance(iters, (int, np.integer)) or iters < 1:
        raise ValueError(f"iters must be an integer >= 1, got {iters!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    n, b, c = _bootstrap_counts(reference, candidate)
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, [b / n, c / n, max(0.0, 1.0 - (b + c) / n)], size=int(iters))
    diffs = (draws[:, 1] - draws[:, 0]) / n
    low, high = np.quantile(diffs, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)
