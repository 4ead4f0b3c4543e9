"""Which tokens carry a row's error (`glmcheck.checks.diagnosis_structure` says when a group carries it).

The token groups tried, in this order of preference at equal size:

- `period`  tokens t = c mod G, G = 2 .. MAX_PERIOD, and the G that the spacing of the tokens beyond the band gives
            (any G up to T / 2: one token in 100);
- `onset`   tokens from t0 on (placed at the change point of the per-token excess, among the onsets that carry it);
- `before`  tokens before t1;
- `index`   groups the indices define: tokens with empty slots or a full selection, with 2^j .. 2^(j+1) - 1 valid
            slots, that attend row 0 (or not), rows >= 2^k, or a row 2^k or more positions behind them;
- `named`   the tokens beyond the band (each one's rel-L2 > RATIO x the band's), when at most FEW, one by one.

When none carries the error, `trend` says whether it grows (or falls) with position, by quarters of the prompt.
"""

from __future__ import annotations

import itertools
import math
from functools import reduce

import torch

from glmcheck.checks.diagnosis_structure import FEW, MAX_PERIOD, RATIO, Axis, Finding, Groups, carried, qualifies, ratio

FAMILIES = ("period", "onset", "before", "index", "named")
REST, REST_SHARE = 4, 0.05  # a group must leave at least this many tokens (and this share of them) outside


def _period_groups(axis: Axis, periods: list[int]) -> Groups:
    t = torch.arange(axis.row.numel())
    rows, bands, sizes, labels = [], [], [], []
    for g in periods:
        residue = t % g
        rows.append(torch.zeros(g, dtype=torch.float64).index_add_(0, residue, axis.row))
        bands.append(torch.zeros(axis.band.shape[0], g, dtype=torch.float64).index_add_(1, residue, axis.band).T)
        sizes.append(torch.bincount(residue, minlength=g).double())
        labels += [("period", (g, c)) for c in range(g)]
    return Groups(torch.cat(rows), torch.cat(bands), torch.cat(sizes), labels)


def _split_groups(axis: Axis) -> tuple[Groups, Groups]:
    """Every onset t >= t0 and every prefix t < t1 (t0, t1 in 1 .. T-1), by prefix sums."""
    n = axis.row.numel()
    cut = torch.arange(1, n)
    row_before = axis.row.cumsum(0)[:-1]
    band_before = axis.band.cumsum(dim=1)[:, :-1].T
    before = Groups(row_before, band_before, cut.double(), [("before", (int(c),)) for c in cut])
    onset = Groups(axis.row.sum() - row_before, axis.band.sum(dim=1)[None, :] - band_before, (n - cut).double(),
                   [("onset", (int(c),)) for c in cut])
    return onset, before


def index_masks(indices: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, list[tuple[str, tuple]]]:
    """[M, T] token groups the indices define (module docstring) and their labels. `indices` [T, K] and `valid`
    [T, K] on any device; positions are the tokens' places in the call."""
    indices, valid = indices.cpu().long(), valid.cpu()
    tokens, topk = indices.shape
    count = valid.sum(dim=1)
    rows = torch.where(valid, indices, -1)
    top = rows.max(dim=1).values
    distance = torch.where(valid, torch.arange(tokens)[:, None] - indices, -1).max(dim=1).values
    masks, labels = [count < topk, count == topk], [("index", ("empty",)), ("index", ("full",))]
    for j in range(int(math.log2(max(topk, 1))) + 1):
        masks.append((count >= 2 ** j) & (count < 2 ** (j + 1)))
        labels.append(("index", ("slots", 2 ** j, 2 ** (j + 1))))
    row0 = (rows == 0).any(dim=1)
    masks += [row0, ~row0 & (count > 0)]
    labels += [("index", ("row0",)), ("index", ("no_row0",))]
    for k in range(1, int(math.log2(max(int(top.max()) + 1, 2))) + 1):
        masks += [top >= 2 ** k, distance >= 2 ** k]
        labels += [("index", ("rows_from", 2 ** k)), ("index", ("distance_from", 2 ** k))]
    return torch.stack(masks), labels


def _spacing_period(axis: Axis) -> int | None:
    """The common spacing of the tokens beyond the band, when there are at least 3 and it is 2 or more."""
    beyond = (axis.ratios() > RATIO).nonzero().flatten().tolist()
    if len(beyond) < 3:
        return None
    g = reduce(math.gcd, [b - beyond[0] for b in beyond[1:]])
    return g if 2 <= g <= axis.row.numel() // 2 else None


def _named_groups(axis: Axis) -> tuple[torch.Tensor, list[tuple[str, tuple]]]:
    """The tokens beyond the band, when at most FEW, as one group."""
    beyond = axis.ratios() > RATIO
    if not 0 < int(beyond.sum()) <= FEW:
        return torch.zeros(0, axis.row.numel(), dtype=torch.bool), []
    return beyond[None, :], [("named", tuple(beyond.nonzero().flatten().tolist()))]


def _members(label: tuple[str, tuple], n: int, index: tuple[torch.Tensor, list]) -> list[int]:
    family, param = label
    t = torch.arange(n)
    if family == "period":
        mask = t % param[0] == param[1]
    elif family == "onset":
        mask = t >= param[0]
    elif family == "before":
        mask = t < param[0]
    elif family == "index":
        mask = index[0][index[1].index(label)]
    else:
        return list(param)
    return mask.nonzero().flatten().tolist()


def _words(label: tuple[str, tuple], members: list[int]) -> str:
    family, param = label
    listed = ", ".join(str(m) for m in members[:4]) + (", ..." if len(members) > 4 else "")
    if family == "period":
        return f"tokens t = {param[1]} mod {param[0]} ({listed})"
    if family == "onset":
        return f"the tokens from t = {param[0]} on"
    if family == "before":
        return f"the tokens before t = {param[0]}"
    if family == "named":
        if len(members) == 1:
            return f"token {members[0]}"
        step = members[1] - members[0]
        spaced = len(members) >= 3 and all(b - a == step for a, b in itertools.pairwise(members))
        return f"tokens {listed}" + (f" (t = {members[0] % step} mod {step})" if spaced else "")
    kind = param[0]
    return {"empty": "the tokens with empty slots (fewer valid slots than top-k)",
            "full": "the tokens with every slot valid",
            "row0": "the tokens that attend row 0", "no_row0": "the tokens that do not attend row 0"}.get(kind) or \
        {"slots": lambda: f"the tokens with {param[1]} to {param[2] - 1} valid slots",
         "rows_from": lambda: f"the tokens that attend rows >= {param[1]}",
         "distance_from": lambda: f"the tokens that attend a row {param[1]} or more positions back"}[kind]()


def _change_point(axis: Axis, onsets: list[int]) -> int:
    """Of `onsets`, where the per-token excess (over the band's mean there) steps most: the largest between-group
    sum of squares."""
    z = axis.excess() / axis.band.mean(dim=0).clamp_min(1e-300)
    n = z.numel()
    total, prefix = float(z.sum()), z.cumsum(0)
    best, where = -math.inf, onsets[0]
    for t0 in onsets:
        before = float(prefix[t0 - 1])
        score = before ** 2 / t0 + (total - before) ** 2 / (n - t0)
        if score > best:
            best, where = score, t0
    return where


def token_finding(axis: Axis, indices: torch.Tensor | None = None, valid: torch.Tensor | None = None
                  ) -> Finding | None:
    """The smallest token group that carries the error (module docstring), with the other groups of the same
    tokens named beside it; None when none does."""
    n = axis.row.numel()
    if n < 2:
        return None
    periods = list(range(2, min(MAX_PERIOD, n // 2) + 1))
    spacing = _spacing_period(axis)
    if spacing and spacing not in periods:
        periods.append(spacing)
    parts = [_period_groups(axis, periods)] if periods else []
    onset, before = _split_groups(axis)
    parts += [onset, before]
    index = (torch.zeros(0, n, dtype=torch.bool), [])
    if indices is not None and valid is not None:
        index = index_masks(indices, valid)
        if len(index[1]):
            parts.append(Groups.of_masks(axis, index[0], index[1]))
    named = _named_groups(axis)
    if len(named[1]):
        parts.append(Groups.of_masks(axis, *named))
    groups = Groups(torch.cat([p.row for p in parts]), torch.cat([p.band for p in parts]),
                    torch.cat([p.size for p in parts]), [label for p in parts for label in p.labels])
    stats = carried(axis, groups)
    rest = max(REST, math.ceil(REST_SHARE * n))  # a rest of a few tokens (the first ones: one or two rows) says little
    ok = (qualifies(axis, groups, stats) & (groups.size <= n - rest)).nonzero().flatten().tolist()
    if not ok:
        return None
    onsets = [groups.labels[i][1][0] for i in ok if groups.labels[i][0] == "onset"]
    if onsets:  # keep one onset: the change point
        step = _change_point(axis, onsets)
        ok = [i for i in ok if groups.labels[i][0] != "onset" or groups.labels[i][1][0] == step]
    best = min(ok, key=lambda i: (float(groups.size[i]), FAMILIES.index(groups.labels[i][0]), i))
    members = _members(groups.labels[best], n, index)
    same = []
    for i in ok:
        if (i != best and groups.size[i] == groups.size[best]
                and groups.labels[i][0] not in [groups.labels[best][0], *[s[0] for s in same]]
                and _members(groups.labels[i], n, index) == members):
            same.append(groups.labels[i])
    share, inside, outside = stats[best].tolist()
    words = _words(groups.labels[best], members)
    also = "".join(f" (= {_words(s, members)})" for s in same if s[0] != "named")
    rest = n - len(members)
    verb = "carries" if len(members) == 1 else "carry"
    text = (f"{words}{also} {verb} {share:.0%} of the excess error, {inside:.3g}x the band; the other {rest} "
            f"tokens within it ({outside:.2g}x)")
    labels = [groups.labels[best], *same]
    figures = {"groups": [{"family": f, "param": list(p)} for f, p in labels], "members": members[:64],
               "count": len(members), "ratio": inside, "rest_ratio": outside, "share": share}
    return Finding("tokens", text, inside, figures)


def trend_finding(axis: Axis) -> Finding | None:
    """The error's rise or fall with position by quarters of the prompt, when every quarter is beyond the band and the
    last is 3x the first or a third of it."""
    n = axis.row.numel()
    if n < 8:
        return None
    quarters = [range(q * n // 4, (q + 1) * n // 4) for q in range(4)]
    ratios = [float(ratio(axis.row[list(r)].sum(), axis.band[:, list(r)].sum(dim=1).max())) for r in quarters]
    if min(ratios) <= RATIO or not (ratios[-1] >= 3 * ratios[0] or ratios[0] >= 3 * ratios[-1]):
        return None
    way = "grows" if ratios[-1] > ratios[0] else "falls"
    text = (f"the error {way} with position: " + ", ".join(f"{r:.3g}x" for r in ratios)
            + " the band in the four quarters of the prompt")
    return Finding("trend", text, max(ratios) / min(ratios), {"quarters": ratios})
