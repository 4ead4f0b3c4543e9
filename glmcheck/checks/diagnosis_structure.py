"""Where a row's error lies: its error energy per token, head and output dimension beside the band's, and the
structure that holds it.

`ErrorField.of(exact, row, band)` reads the outputs [T, H, D] once in fp64 (where they are) and keeps, on the host,
the squared error of the row and of each ideal variant per (token, head) cell and per output dimension. Along one
axis a **group** of elements (some heads; tokens t = c mod G, from t0 on, before t1, a few named ones, those with
empty slots, those that attend row 0 or rows >= 2^k or rows 2^k or more behind them; a range of output dims)
**carries the error** when

- it holds at least SHARE of the row's excess energy (the row's error energy minus the band's mean, summed over the
  group),
- it is beyond the band: its rel-L2 > RATIO x the band's largest rel-L2 over the same group, and
- the rest is within the band: its rel-L2 <= RATIO x the band's largest over it, and the group's ratio is at least
  CONTRAST x the rest's (a step, not a gradient).

A legitimate kernel is one more variant of the band: no part of it is beyond the band while the rest lies within and
holds its excess, so it carries no group. Of the groups that carry a row's error the smallest is named (ties: the
family listed first). Heads and dims: every element beyond the band (its own rel-L2 over all tokens > RATIO x the
band's) forms the group, which is then described (a range, a period, a list). An onset is placed where the
per-token excess steps (the change point among the onsets that carry the error).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch

SHARE = 0.9  # the share of the row's excess energy a group must hold
RATIO = 2.0  # beyond the band: rel-L2 over the group > RATIO x the band's largest there (the gate's ratio)
CONTRAST = 2.0  # and at least this many times the rest's (a gradient, as bf16 scores that worsen with more slots, is
# no group: its trend is said instead)
MAX_PERIOD = 64  # periods t mod G searched, G = 2 .. MAX_PERIOD (and the one the beyond tokens' spacing gives)
FEW = 8  # at most this many tokens are named one by one
PROFILE_BINS = 256  # positions of the stored profile (error by position)


@dataclass(frozen=True)
class Axis:
    """Error energies along one axis (host, fp64): the row's [n] and each ideal variant's [N, n]."""

    row: torch.Tensor
    band: torch.Tensor

    def excess(self) -> torch.Tensor:
        return self.row - self.band.mean(dim=0)

    def ratios(self) -> torch.Tensor:
        """[n]: each element's rel-L2 over the band's largest (inf where the band is 0 and the row is not)."""
        return ratio(self.row, self.band.max(dim=0).values)


def ratio(row: torch.Tensor, band_max: torch.Tensor) -> torch.Tensor:
    """sqrt(row / band_max) elementwise: rel-L2 over the band's largest rel-L2 (same reference norm)."""
    return torch.where(band_max > 0, (row / band_max.clamp_min(1e-300)).sqrt(),
                       torch.where(row > 0, math.inf, 0.0))


@dataclass(frozen=True)
class ErrorField:
    """Squared errors of a row and of the band's ideal variants: per (token, head) cell `cells` [T, H] and
    `band_cells` [N, T, H], per output dim `dims` [D] and `band_dims` [N, D]; host, fp64."""

    cells: torch.Tensor
    band_cells: torch.Tensor
    dims: torch.Tensor
    band_dims: torch.Tensor

    @classmethod
    def of(cls, exact: torch.Tensor, row: torch.Tensor, band: list[torch.Tensor]) -> ErrorField:
        """From outputs [T, H, D] (any float dtype; read as fp64 on exact's device)."""
        e = exact.detach().double()

        def sq(actual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            d = actual.detach().to(e.device, torch.float64) - e
            d = d * d
            return d.sum(dim=-1), d.sum(dim=(0, 1))

        row_cells, row_dims = sq(row)
        pairs = [sq(b) for b in band]
        return cls(row_cells.cpu(), torch.stack([p[0] for p in pairs]).cpu(), row_dims.cpu(),
                   torch.stack([p[1] for p in pairs]).cpu())

    def tokens(self) -> Axis:
        return Axis(self.cells.sum(dim=1), self.band_cells.sum(dim=2))

    def heads(self) -> Axis:
        return Axis(self.cells.sum(dim=0), self.band_cells.sum(dim=1))

    def output_dims(self) -> Axis:
        return Axis(self.dims, self.band_dims)

    def total_ratio(self) -> float:
        return float(ratio(self.cells.sum(), self.band_cells.sum(dim=(1, 2)).max()))


@dataclass
class Finding:
    """One thing the diagnosis says of a row: its `kind` (heads, tokens, dims, slots, scale, temperature, spread),
    the words, the figures behind them, and a strength for ordering (larger first)."""

    kind: str
    text: str
    strength: float
    figures: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "text": self.text, **self.figures}


@dataclass(frozen=True)
class Groups:
    """Candidate groups along one axis: sums of the row [M] and band [M, N] energies over each, sizes [M], each
    one's family and parameter."""

    row: torch.Tensor
    band: torch.Tensor
    size: torch.Tensor
    labels: list[tuple[str, tuple]]

    @staticmethod
    def of_masks(axis: Axis, masks: torch.Tensor, labels: list[tuple[str, tuple]]) -> Groups:
        m = masks.double()
        return Groups(m @ axis.row, m @ axis.band.T, masks.sum(dim=1).double(), labels)


def carried(axis: Axis, groups: Groups) -> torch.Tensor:
    """[M, 3]: share of the excess, rel-L2 ratio inside, ratio outside; and a row of NaN where undefined."""
    excess_total = float(axis.excess().sum())
    row_total, band_total = axis.row.sum(), axis.band.sum(dim=1)
    excess = groups.row - groups.band.mean(dim=1)
    share = excess / excess_total if excess_total > 0 else torch.full_like(excess, math.nan)
    inside = ratio(groups.row, groups.band.max(dim=1).values)
    outside = ratio((row_total - groups.row).clamp_min(0), (band_total[None, :] - groups.band).clamp_min(0)
                    .max(dim=1).values)
    return torch.stack([share, inside, outside], dim=1)


def qualifies(axis: Axis, groups: Groups, stats: torch.Tensor) -> torch.Tensor:
    """[M] bool: the groups that carry the error (module docstring): proper, non-empty subsets, the band not 0 over
    the rest (a rest every kernel gets exactly right, as a token that attends one row, says nothing)."""
    share, inside, outside = stats.unbind(dim=1)
    rest_band = (axis.band.sum(dim=1)[None, :] - groups.band).max(dim=1).values
    return (share >= SHARE) & (inside > RATIO) & (outside <= RATIO) & (inside >= CONTRAST * outside.clamp_min(1)) & \
        (groups.size >= 1) & (groups.size < axis.row.numel()) & (rest_band > 0)


def _members_text(members: list[int], limit: int = 6) -> str:
    shown = ", ".join(str(m) for m in members[:limit])
    if len(members) > limit:
        shown += f", ... ({len(members)})"
    return shown.rsplit(", ", 1)[0] + " and " + shown.rsplit(", ", 1)[1] if len(members) in range(2, limit + 1) \
        else shown


def describe_set(members: list[int], n: int, noun: str) -> tuple[str, dict]:
    """Words for a set of axis elements: a range, a period, or a list."""
    members = sorted(members)
    if len(members) >= 3 and members == list(range(members[0], members[-1] + 1)):
        return f"{noun} {members[0]}-{members[-1]}", {"range": [members[0], members[-1] + 1]}
    if len(members) >= 3:
        step = members[1] - members[0]
        if step > 1 and all(b - a == step for a, b in itertools.pairwise(members)) and \
                members[0] < step and members[-1] + step >= n:
            return (f"{noun} {members[0]} mod {step} ({_members_text(members, 4)})",
                    {"period": step, "residue": members[0]})
    word = noun if len(members) > 1 else noun.rstrip("s")
    return f"{word} {_members_text(members)}", {"members": members}


def element_finding(axis: Axis, noun: str, kind: str) -> Finding | None:
    """The axis elements beyond the band (heads, dims), when they carry the error; None otherwise."""
    beyond = axis.ratios() > RATIO
    n = axis.row.numel()
    if not bool(beyond.any()) or int(beyond.sum()) > n // 2:  # a few of them, not most
        return None
    groups = Groups.of_masks(axis, beyond[None, :], [("beyond", ())])
    stats = carried(axis, groups)
    if not bool(qualifies(axis, groups, stats)[0]):
        return None
    share, inside, outside = stats[0].tolist()
    members = beyond.nonzero().flatten().tolist()
    words, figures = describe_set(members, n, noun)
    rest = n - len(members)
    text = (f"{words}: {inside:.3g}x the band; the other {rest} within it ({outside:.2g}x), "
            f"{share:.0%} of the excess error")
    return Finding(kind, text, inside, {**figures, "members": members, "ratio": inside, "rest_ratio": outside,
                                       "share": share})


def describe_dims(axis: Axis) -> Finding | None:
    """Output dims beyond the band that carry the error (`element_finding`)."""
    return element_finding(axis, "output dims", "dims")


def profile(axis: Axis, bins: int = PROFILE_BINS) -> dict:
    """The row's error norm and the band's largest per element, or per bin of `width` elements when there are more
    than `bins` (for plots): {"start": [first element of each bin], "width", "row": [...], "band": [...]}."""
    n = axis.row.numel()
    width = max(1, math.ceil(n / bins))
    starts = list(range(0, n, width))
    row = [float(axis.row[s:s + width].sum().sqrt()) for s in starts]
    band = [float(axis.band[:, s:s + width].sum(dim=1).max().sqrt()) for s in starts]
    return {"start": starts, "width": width, "row": row, "band": band}
